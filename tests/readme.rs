//! The docs' configuration tables are checked against the declaration, and
//! the error table against the codes, so the pages cannot drift from the code.

use dokebi_lock::options::declaration::{
    Fallback, Field, Kind, CLUSTER_FIELDS, CONNECTION_FIELDS, FILE_FIELDS, LOCAL_FIELDS, POSTGRES_CONNECTION_FIELDS, POSTGRES_FIELDS,
    REDIS_FIELDS, SENTINEL_FIELDS, TLS_FIELDS,
};
use dokebi_lock::ErrorCode;

/// A page of the docs, by its path from the repository's root.
fn page(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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
fn each_driver_page_states_every_field_with_its_range_and_default() {
    let pages: [(&str, Vec<&Field>); 4] = [
        ("docs/local.md", LOCAL_FIELDS.iter().collect()),
        ("docs/file.md", FILE_FIELDS.iter().collect()),
        (
            "docs/redis.md",
            REDIS_FIELDS.iter().chain(CONNECTION_FIELDS).chain(SENTINEL_FIELDS).chain(CLUSTER_FIELDS).chain(TLS_FIELDS).collect(),
        ),
        ("docs/postgres.md", POSTGRES_FIELDS.iter().chain(POSTGRES_CONNECTION_FIELDS).collect()),
    ];
    for (path, fields) in pages {
        let text = page(path);
        for field in fields {
            let row = row(field);
            assert!(text.contains(&row), "{path} lacks the row {row}");
        }
    }
}

#[test]
fn the_error_page_lists_every_error_code() {
    let text = page("docs/errors.md");
    for code in ErrorCode::ALL {
        assert!(text.contains(&format!("`{}`", code.as_str())), "docs/errors.md lacks {code}");
    }
}

/// The first ```lang block after `heading` in the README.
fn readme_block(heading: &str, lang: &str) -> String {
    let readme = page("README.md");
    let section = &readme[readme.find(heading).unwrap_or_else(|| panic!("README lacks {heading}"))..];
    let start = section.find(&format!("```{lang}\n")).unwrap_or_else(|| panic!("{heading} has no {lang} block")) + lang.len() + 4;
    section[start..start + section[start..].find("```").unwrap()].to_owned()
}

/// The README's Rust quick start, compiled and run here as it is written.
mod quickstart {
    include!("../examples/quickstart.rs");

    pub fn run() -> Result<(), LockError> {
        main()
    }
}

#[test]
fn the_readme_quick_starts_are_the_examples_that_build_and_run() {
    assert_eq!(readme_block("## Quick start: Rust", "rust"), page("examples/quickstart.rs"), "README's Rust quick start differs from examples/quickstart.rs");
    // scripts/test-c builds and runs examples/c/quickstart.c with the README's shell lines.
    assert_eq!(readme_block("## Quick start: C", "c"), page("examples/c/quickstart.c"), "README's C quick start differs from examples/c/quickstart.c");
    quickstart::run().unwrap();
}
