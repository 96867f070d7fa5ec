//! The parsed options map (`Options::from_config`): whatever the value, the
//! answer is options or an options error listing its issues, never a panic.
//!
//! Input: JSON text when it parses (the seed corpus is readable JSON),
//! otherwise a value built from the bytes by `arbitrary`, biased towards the
//! real field names and values so that mutations reach the deep checks.
//!
//! Differential check: the same value written as a YAML file (JSON is YAML:
//! `{"schemaVersion":1,"options":<value>}`) loads with `from_yaml` to the same
//! options or the same error, when the value is within the YAML limits and
//! holds only text both readers take the same way.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use dokebi_lock::{ErrorCode, LockError, Options};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

const NAMES: &[&str] = &[
    "dokebi-lock", "dokebi-redis", "backends", "connections", "driver", "local", "redis", "connection", "main",
    "namespace", "leaseMs", "maxKeys", "maxWaiters", "waitTimeoutMs", "maxKeyBytes", "slowAcquireMs", "slowHoldMs",
    "maxLeases", "replicaAcks", "fenceRetentionMs", "shutdownTimeoutMs", "url", "sentinel", "cluster", "nodes", "primaryName", "username",
    "password", "db", "tls", "connectTimeoutMs", "commandTimeoutMs", "orders", "jobs", "shared", "x",
    "redis://127.0.0.1:6379/0", "rediss://h:1", "redis://[::1]:6379", "sentinel://s:26379", "",
];

/// A name from the list above or any short text.
#[derive(Arbitrary, Debug)]
enum Name {
    Known(u8),
    Other(String),
}

impl Name {
    fn text(self) -> String {
        match self {
            Name::Known(i) => NAMES[usize::from(i) % NAMES.len()].to_owned(),
            Name::Other(s) => s,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Node {
    Null,
    Bool(bool),
    Small(u16),
    Int(i64),
    UInt(u64),
    Float(f64),
    Text(Name),
    List(Vec<Node>),
    Map(Vec<(Name, Node)>),
}

impl Node {
    fn value(self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(b),
            Node::Small(n) => Value::from(n),
            Node::Int(n) => Value::from(n),
            Node::UInt(n) => Value::from(n),
            Node::Float(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
            Node::Text(name) => Value::String(name.text()),
            Node::List(items) => Value::Array(items.into_iter().map(Node::value).collect()),
            Node::Map(entries) => Value::Object(entries.into_iter().map(|(k, v)| (k.text(), v.value())).collect::<Map<_, _>>()),
        }
    }
}

fn check_error(err: &LockError) {
    match err.code() {
        ErrorCode::InvalidOptions | ErrorCode::UnknownConnection => {}
        other => panic!("from_config answered {other}: {err}"),
    }
    assert!(!err.issues().is_empty(), "an options error lists its issues: {err}");
}

/// Depth and count of values as the YAML reader counts them (a mapping key
/// is a value too), and whether every string and number reads back from
/// YAML as it was written as JSON.
fn shape(value: &Value, depth: usize, count: &mut usize, plain: &mut bool) -> usize {
    *count += 1;
    match value {
        Value::String(s) => {
            *plain &= s.bytes().all(|b| (0x20..0x7f).contains(&b));
            0
        }
        Value::Number(n) => {
            // Floats are written by serde_json and read by YAML's own rules.
            *plain &= !n.is_f64();
            0
        }
        Value::Array(items) => 1 + items.iter().map(|v| shape(v, depth + 1, count, plain)).max().unwrap_or(0),
        Value::Object(map) => {
            1 + map
                .iter()
                .map(|(k, v)| {
                    *count += 1;
                    *plain &= k.bytes().all(|b| (0x20..0x7f).contains(&b));
                    shape(v, depth + 1, count, plain)
                })
                .max()
                .unwrap_or(0)
        }
        _ => 0,
    }
}

fuzz_target!(|data: &[u8]| {
    let value = match serde_json::from_slice::<Value>(data) {
        Ok(value) => value,
        Err(_) => match Node::arbitrary_take_rest(Unstructured::new(data)) {
            Ok(node) => node.value(),
            Err(_) => return,
        },
    };
    let from_config = Options::from_config(&value);
    if let Err(err) = &from_config {
        check_error(err);
    }

    let (mut count, mut plain) = (0, true);
    let depth = shape(&value, 0, &mut count, &mut plain);
    if depth + 2 > 60 || count > 50_000 || !plain {
        return;
    }
    let document = json!({ "schemaVersion": 1, "options": value });
    let text = serde_json::to_string(&document).expect("a JSON value serializes");
    let from_yaml = Options::from_yaml(&text);
    match (&from_config, &from_yaml) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "from_config and from_yaml load different options"),
        (Err(a), Err(b)) => {
            assert_eq!(a.code(), b.code(), "from_config: {a}\nfrom_yaml: {b}\n{text}");
            assert_eq!(a.issues(), b.issues(), "from_config and from_yaml list different issues\n{text}");
        }
        (a, b) => panic!(
            "from_config and from_yaml disagree: {:?} vs {:?}\n{text}",
            a.as_ref().err().map(ToString::to_string),
            b.as_ref().err().map(ToString::to_string)
        ),
    }
});
