//! The README's configuration tables are checked against the declaration, so
//! the front door cannot drift from the code.

use dokebi_lock::options::declaration::{
    Fallback, Field, Kind, CLUSTER_FIELDS, CONNECTION_FIELDS, FILE_FIELDS, LOCAL_FIELDS, POSTGRES_CONNECTION_FIELDS, POSTGRES_FIELDS,
    REDIS_FIELDS, SENTINEL_FIELDS, TLS_FIELDS,
};
use dokebi_lock::ErrorCode;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap()
}

fn row(field: &Field) -> String {
    let kind = match field.kind {
        Kind::Integer { min, max } => format!("integer {min}–{max}"),
        Kind::Threshold { max } => format!("integer 0–{max} or null"),
        Kind::Text | Kind::RedisUrl | Kind::PostgresUrl | Kind::SqlName => "string".to_owned(),
        Kind::Boolean => "boolean".to_owned(),
        Kind::RedisUrls => "list of URLs".to_owned(),
        Kind::Table(_) => "mapping".to_owned(),
    };
    let default = match field.fallback {
        Fallback::Required => "required".to_owned(),
        Fallback::Absent => "none".to_owned(),
        Fallback::Boolean(value) => value.to_string(),
        Fallback::Integer(value) => value.to_string(),
        Fallback::Text(value) => value.to_owned(),
    };
    format!("| `{}` | {kind} | {default} |", field.name)
}

#[test]
fn the_readme_tables_state_every_field_with_its_range_and_default() {
    let readme = readme();
    for field in LOCAL_FIELDS
        .iter()
        .chain(REDIS_FIELDS)
        .chain(FILE_FIELDS)
        .chain(POSTGRES_FIELDS)
        .chain(POSTGRES_CONNECTION_FIELDS)
        .chain(CONNECTION_FIELDS)
        .chain(SENTINEL_FIELDS)
        .chain(CLUSTER_FIELDS)
        .chain(TLS_FIELDS)
    {
        let row = row(field);
        assert!(readme.contains(&row), "README lacks the row {row}");
    }
}

#[test]
fn the_readme_lists_every_error_code() {
    let readme = readme();
    for code in ErrorCode::ALL {
        assert!(readme.contains(&format!("`{}`", code.as_str())), "README lacks {code}");
    }
}
