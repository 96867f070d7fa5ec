//! Generated and mutated input for the option loader and the key rules
//! (property tests stand in for a coverage fuzzer, which needs a nightly
//! toolchain this project's machines do not have). Whatever comes in, the
//! answer is a value or a `LockError` with the right code: never a panic, never
//! an empty issue list, never a key in a message.

use dokebi_lock::{key, ErrorCode, Options};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Arbitrary JSON-like values, small and nested.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map(Value::Number).unwrap_or(Value::Null)),
        "[a-zA-Z:/0-9.]{0,12}".prop_map(Value::from),
        prop_oneof![Just("local"), Just("redis"), Just("main"), Just("redis://h:1")].prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(field_name(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Field names biased towards the real ones, so mutations reach deep checks.
fn field_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop_oneof![
            Just("backends"), Just("connections"), Just("driver"), Just("connection"), Just("leaseMs"),
            Just("maxKeys"), Just("maxWaiters"), Just("waitTimeoutMs"), Just("url"), Just("namespace"),
            Just("dokebi-lock"), Just("dokebi-redis"), Just("x"),
        ].prop_map(str::to_owned),
        1 => "[a-z]{1,8}",
    ]
}

fn check_error(err: &dokebi_lock::LockError) {
    match err.code() {
        ErrorCode::InvalidOptions | ErrorCode::UnknownConnection => {
            assert!(!err.issues().is_empty(), "an options error lists its issues");
        }
        other => panic!("unexpected code {other}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_options_maps_load_or_fail_with_listed_issues(config in value()) {
        if let Err(err) = Options::from_config(&config) {
            check_error(&err);
        }
    }

    #[test]
    fn mutated_valid_documents_load_or_fail_with_listed_issues(path in proptest::collection::vec(field_name(), 1..4), replacement in value()) {
        let mut document = json!({
            "dokebi-lock": { "backends": {
                "x": { "maxKeys": 10 },
                "shared": { "driver": "redis", "connection": "main", "leaseMs": 1000 }
            }},
            "dokebi-redis": { "connections": { "main": { "url": "redis://h:1" } } }
        });
        let mut cursor = &mut document;
        for name in &path {
            if !cursor.is_object() {
                break;
            }
            cursor = cursor.as_object_mut().unwrap().entry(name.clone()).or_insert(Value::Null);
        }
        *cursor = replacement;
        if let Err(err) = Options::from_config(&document) {
            check_error(&err);
        }
    }

    #[test]
    fn arbitrary_yaml_text_never_panics(text in "[ -~\n]{0,200}") {
        if let Err(err) = Options::from_yaml(&text) {
            check_error(&err);
        }
    }

    #[test]
    fn utf16_keys_are_accepted_exactly_when_well_formed_without_u0000_and_short_enough(units in proptest::collection::vec(prop_oneof![any::<u16>(), 0xD800u16..0xE000], 0..40), max in 1usize..64) {
        let expected = String::from_utf16(&units).ok().filter(|k| !k.is_empty() && k.len() <= max && !k.contains('\0'));
        match key::from_utf16(&units, max) {
            Ok(key) => prop_assert_eq!(Some(key), expected),
            Err(err) => {
                prop_assert!(expected.is_none());
                prop_assert_eq!(err.code(), ErrorCode::InvalidKey);
            }
        }
    }

    #[test]
    fn utf8_keys_are_accepted_exactly_when_valid_without_u0000_and_short_enough(bytes in proptest::collection::vec(any::<u8>(), 0..40), max in 1usize..64) {
        let expected = std::str::from_utf8(&bytes).ok().filter(|k| !k.is_empty() && k.len() <= max && !k.contains('\0'));
        match key::from_utf8(&bytes, max) {
            Ok(key) => prop_assert_eq!(Some(key), expected),
            Err(err) => {
                prop_assert!(expected.is_none());
                prop_assert_eq!(err.code(), ErrorCode::InvalidKey);
                // The message never carries the key, even a printable one.
                if let Some(text) = std::str::from_utf8(&bytes).ok().filter(|t| t.len() > 3) {
                    prop_assert!(!err.to_string().contains(text));
                }
            }
        }
    }
}
