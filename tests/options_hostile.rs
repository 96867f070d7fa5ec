//! Hostile configuration text: duplicated keys, alias bombs, integers past 64
//! bits. Each is an `INVALID_OPTIONS` naming where it is.

use dokebi_lock::options::Options;
use dokebi_lock::options::yaml::{MAX_DEPTH, MAX_VALUES};
use dokebi_lock::{ErrorCode, LockError};

fn rejected(text: &str) -> LockError {
    let err = Options::from_yaml(text).expect_err("the text is rejected");
    assert_eq!(err.code(), ErrorCode::InvalidOptions, "{}", err.message());
    err
}

fn paths(err: &LockError) -> Vec<String> {
    err.issues().into_iter().map(|i| i.path).collect()
}

fn backend(fields: &str) -> String {
    format!("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      shared:\n{fields}")
}

#[test]
fn a_duplicated_field_is_named_not_overwritten() {
    let err = rejected(&backend("        maxKeys: 5\n        maxKeys: 50\n"));
    assert_eq!(paths(&err), ["backends.shared.maxKeys"]);
    assert!(err.issues()[0].message.contains("duplicate"), "{}", err.issues()[0].message);
}

#[test]
fn a_duplicated_backend_and_a_duplicated_schema_version_are_named() {
    let text = "schemaVersion: 1\nschemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: {}\n      a: {maxKeys: 3}\n";
    let err = rejected(text);
    assert_eq!(paths(&err), ["schemaVersion", "backends.a"]);
}

#[test]
fn a_duplicated_key_in_a_flow_mapping_is_named() {
    let err = rejected(&backend("        {maxKeys: 5, maxKeys: 6}\n").replace("shared:\n        {", "shared: {"));
    assert_eq!(paths(&err), ["backends.shared.maxKeys"]);
}

#[test]
fn a_duplicate_outside_this_plugin_s_sections_is_named_from_the_root() {
    let err = rejected("schemaVersion: 1\noptions:\n  dokebi-web:\n    routes:\n      - port: 1\n        port: 2\n");
    assert_eq!(paths(&err), ["options.dokebi-web.routes.0.port"]);
}

#[test]
fn an_integer_past_64_bits_is_out_of_range_at_its_field() {
    for value in ["100000000000000000000", "-100000000000000000000", "340282366920938463463374607431768211456"] {
        let err = rejected(&backend(&format!("        maxKeys: {value}\n")));
        assert_eq!(paths(&err), ["backends.shared.maxKeys"], "{value}");
        assert_eq!(err.issues()[0].message, "must be an integer from 1 to 10000000", "{value}");
    }
}

#[test]
fn an_alias_bomb_is_rejected_without_expanding_it() {
    let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for (name, previous) in ('b'..='j').zip('a'..='i') {
        text += &format!("{name}: &{name} [{}]\n", vec![format!("*{previous}"); 10].join(", "));
    }
    let err = rejected(&text);
    assert!(err.issues()[0].message.contains(&MAX_VALUES.to_string()), "{}", err.issues()[0].message);
}

#[test]
fn nesting_built_by_aliases_is_held_to_the_same_limit() {
    let mut text = String::from("a0: &a0 [1]\n");
    for level in 1..=MAX_DEPTH {
        text += &format!("a{level}: &a{level} [*a{}]\n", level - 1);
    }
    let err = rejected(&text);
    assert_eq!(paths(&err), [""]);
    assert!(err.issues()[0].message.contains(&MAX_DEPTH.to_string()), "{}", err.issues()[0].message);
}

#[test]
fn a_wide_alias_fan_out_is_held_to_the_value_budget() {
    let items = vec!["x"; 1_000].join(", ");
    let aliases = vec!["*big"; 200].join(", ");
    let err = rejected(&format!("big: &big [{items}]\nall: [{aliases}]\n"));
    assert!(err.issues()[0].message.contains(&MAX_VALUES.to_string()), "{}", err.issues()[0].message);
}

#[test]
fn aliases_within_the_budget_load() {
    let text = "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: &defaults {maxKeys: 7}\n      b: *defaults\n";
    let options = Options::from_yaml(text).unwrap();
    assert_eq!(options.backends["a"], options.backends["b"]);
}
