//! Hostile configuration text: duplicated keys, deep nesting, alias bombs,
//! integers past 64 bits. Each is an `INVALID_OPTIONS` naming where it is, and
//! none costs more than a pass over the text.

use dokebi_lock::options::yaml::{MAX_DEPTH, MAX_VALUES, MAX_YAML_BYTES};
use dokebi_lock::options::Options;
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
fn nesting_past_the_limit_is_rejected_with_the_limit_in_the_message() {
    let limit = MAX_DEPTH.to_string();
    let deep = MAX_DEPTH + 1;
    let block_mappings: String = (0..deep).map(|level| format!("{}k:\n", " ".repeat(level))).collect();
    for text in [
        "[".repeat(deep),
        "{a: ".repeat(deep),
        format!("x: {}{}", "[".repeat(deep), "]".repeat(deep)),
        "- ".repeat(deep) + "x\n",
        "? ".repeat(deep) + "x\n",
        block_mappings,
        format!("a: &a {}1{}\nb: *a\n", "[".repeat(deep), "]".repeat(deep)),
    ] {
        let err = rejected(&text);
        assert_eq!(paths(&err), [""], "{text}");
        assert!(err.issues()[0].message.contains(&limit), "{}", err.issues()[0].message);
    }
}

#[test]
fn nesting_up_to_the_limit_is_only_the_validator_s_business() {
    let text = format!("schemaVersion: 1\noptions:\n  other: {}1{}\n", "[".repeat(MAX_DEPTH - 2), "]".repeat(MAX_DEPTH - 2));
    Options::from_yaml(&text).unwrap();
}

#[test]
fn brackets_inside_quotes_comments_and_plain_text_are_not_nesting() {
    let text = format!(
        "schemaVersion: 1 # {open}\noptions:\n  other:\n    a: '{open}'\n    b: \"{open}\"\n    c: x{open}\n    d: |\n      {open}\n",
        open = "[".repeat(MAX_DEPTH * 2)
    );
    Options::from_yaml(&text).unwrap();
}

/// The parser's time grows with the square of the flow depth (20,000 levels
/// of `{a: ` took 5 s, so 200,000 would take minutes): this test would hang if
/// the parser saw the text. The scan answers first, and no parser error is
/// attached as the cause.
#[test]
fn very_deep_nesting_is_rejected_by_the_scan_before_parsing() {
    for text in ["[".repeat(200_000), "{a: ".repeat(200_000), "- ".repeat(200_000)] {
        let err = rejected(&text);
        assert!(err.cause().is_none(), "the parser never ran: {}", err.message());
        assert!(err.issues()[0].message.contains(&MAX_DEPTH.to_string()));
    }
}

#[test]
fn text_past_the_size_limit_is_rejected_before_parsing() {
    let text = format!("schemaVersion: 1\noptions: {{}}\n#{}\n", "x".repeat(MAX_YAML_BYTES));
    let err = rejected(&text);
    assert!(err.cause().is_none());
    assert!(err.issues()[0].message.contains(&MAX_YAML_BYTES.to_string()), "{}", err.issues()[0].message);
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
