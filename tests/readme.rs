//! The docs' configuration tables are checked against the declaration, and
//! the error table against the codes, so the pages cannot drift from the code.

use dokebi_lock::options::declaration::{
    Fallback, Field, Kind, CLUSTER_FIELDS, CONNECTION_FIELDS, FILE_FIELDS, LOCAL_FIELDS, MYSQL_CONNECTION_FIELDS, MYSQL_FIELDS,
    POLICY_FIELDS, POSTGRES_CONNECTION_FIELDS, POSTGRES_FIELDS, REDIS_FIELDS, RULE_FIELDS, SENTINEL_FIELDS, TLS_FIELDS,
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
        Kind::Text | Kind::RedisUrl | Kind::PostgresUrl | Kind::MysqlUrl | Kind::SqlName => "string".to_owned(),
        Kind::Boolean => "boolean".to_owned(),
        Kind::RedisUrls => "list of URLs".to_owned(),
        Kind::Table(_) => "mapping".to_owned(),
        Kind::List(_) => "list of mappings".to_owned(),
        Kind::Names => "list of backend names".to_owned(),
        Kind::Choice(choices) => choices.join(", "),
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
    let pages: [(&str, Vec<&Field>); 6] = [
        ("docs/local.md", LOCAL_FIELDS.iter().collect()),
        ("docs/file.md", FILE_FIELDS.iter().collect()),
        (
            "docs/redis.md",
            REDIS_FIELDS.iter().chain(CONNECTION_FIELDS).chain(SENTINEL_FIELDS).chain(CLUSTER_FIELDS).chain(TLS_FIELDS).collect(),
        ),
        ("docs/postgres.md", POSTGRES_FIELDS.iter().chain(POSTGRES_CONNECTION_FIELDS).collect()),
        ("docs/policy.md", POLICY_FIELDS.iter().chain(RULE_FIELDS).collect()),
        ("docs/mysql.md", MYSQL_FIELDS.iter().chain(MYSQL_CONNECTION_FIELDS).collect()),
    ];
    for (path, fields) in pages {
        let text = page(path);
        for field in fields {
            let row = row(field);
            assert!(text.contains(&row), "{path} lacks the row {row}");
        }
    }
}

/// The HTTP answer `npm/lib/lock-error.js` gives for `code` (`error.http`):
/// overload, shutdown, then every other transient code as a store outage
/// (Redis's own name for an error a redis backend raised).
fn http_answer(code: ErrorCode) -> &'static str {
    match code {
        ErrorCode::QueueFull | ErrorCode::KeyLimit => "503 `LOCK_OVERLOADED`",
        ErrorCode::Closed => "503 `LOCK_UNAVAILABLE`",
        ErrorCode::ProviderFailed | ErrorCode::OutcomeUnknown => "503 `LOCK_STORE_UNAVAILABLE` (a redis backend's: `REDIS_UNAVAILABLE`)",
        code if code.is_transient() => "503 `LOCK_STORE_UNAVAILABLE`",
        _ => "none",
    }
}

#[test]
fn the_error_table_gives_every_code_its_c_number_http_answer_and_transience() {
    let text = page("docs/errors.md");
    // Each row: codes, C numbers, HTTP answer, transient, drivers, when.
    let mut rows = Vec::new();
    for line in text.lines().filter(|line| line.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let codes: Vec<&str> = cells[0].trim_start_matches("| ").split(", ").map(|code| code.trim_matches('`')).collect();
        let numbers: Vec<&str> = cells[1].split(", ").collect();
        assert_eq!(codes.len(), numbers.len(), "docs/errors.md: {line}");
        for (code, number) in codes.into_iter().zip(numbers) {
            rows.push((code.to_owned(), number.to_owned(), cells[2].to_owned(), cells[3].to_owned()));
        }
    }
    for code in ErrorCode::ALL {
        let found: Vec<_> = rows.iter().filter(|(name, ..)| name == code.as_str()).collect();
        assert_eq!(found.len(), 1, "docs/errors.md has {} rows for {code}", found.len());
        let (_, number, http, transient) = found[0];
        assert_eq!(*number, (code as u32).to_string(), "docs/errors.md: the C number of {code}");
        assert!(http.starts_with(http_answer(code)), "docs/errors.md: the HTTP answer of {code} is {}, not {http}", http_answer(code));
        assert_eq!(*transient, if code.is_transient() { "yes" } else { "no" }, "docs/errors.md: whether {code} is transient");
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
    include!("readme/quickstart.rs");

    pub fn run() -> Result<(), LockError> {
        main()
    }
}

#[test]
fn the_readme_quick_starts_are_the_examples_that_build_and_run() {
    assert_eq!(
        readme_block("## Quick start: Rust", "rust"),
        page("tests/readme/quickstart.rs"),
        "README's Rust quick start differs from tests/readme/quickstart.rs"
    );
    // scripts/test-c builds and runs examples/c/quickstart.c with the README's shell lines.
    assert_eq!(
        readme_block("## Quick start: C", "c"),
        page("examples/c/quickstart.c"),
        "README's C quick start differs from examples/c/quickstart.c"
    );
    quickstart::run().unwrap();
}

/// Every whole configuration file the pages show (a ```yaml block that starts
/// with `schemaVersion`) loads; the other blocks are parts of one.
#[test]
fn every_whole_configuration_the_pages_show_loads() {
    let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs");
    let mut pages: Vec<String> = std::fs::read_dir(&docs)
        .unwrap()
        .map(|entry| format!("docs/{}", entry.unwrap().file_name().to_string_lossy()))
        .filter(|name| name.ends_with(".md"))
        .collect();
    pages.push("README.md".to_owned());
    let mut loaded = 0;
    for path in pages {
        let text = page(&path);
        for block in text.split("```yaml\n").skip(1).map(|rest| &rest[..rest.find("```").unwrap()]) {
            if block.starts_with("schemaVersion:") {
                dokebi_lock::Options::from_yaml(block).unwrap_or_else(|e| panic!("{path}: a configuration does not load: {e}\n{block}"));
                loaded += 1;
            }
        }
    }
    assert!(loaded >= 2, "the pages show {loaded} whole configurations; docs/configuration.md and docs/file.md have one each");
}

/// GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The text of a page outside its code blocks.
fn prose(text: &str) -> String {
    text.split("```").step_by(2).collect::<Vec<_>>().join("\n")
}

/// Every relative link of the README, the maintainers' pages and docs/ names a
/// file that exists, and a heading of it when it has an anchor.
#[test]
fn every_link_between_the_pages_leads_somewhere() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages: Vec<String> =
        ["README.md", "TESTING.md", "CONTRIBUTING.md", "BENCHMARKS.md", "npm/README.md"].map(str::to_owned).to_vec();
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        pages.push(format!("docs/{}", entry.unwrap().file_name().to_string_lossy()));
    }
    for path in pages.iter().filter(|path| path.ends_with(".md")) {
        let text = prose(&page(path));
        for link in text.split("](").skip(1).map(|rest| &rest[..rest.find(')').unwrap_or(0)]) {
            if link.starts_with("http") || link.contains(' ') || link.is_empty() {
                continue;
            }
            let (file, fragment) = link.split_once('#').unwrap_or((link, ""));
            let target = if file.is_empty() { root.join(path) } else { root.join(path).parent().unwrap().join(file) };
            assert!(target.exists(), "{path}: the link {link} leads nowhere");
            if !fragment.is_empty() {
                let headings = prose(&std::fs::read_to_string(&target).unwrap());
                let found =
                    headings.lines().filter(|line| line.starts_with('#')).any(|line| anchor(line.trim_start_matches('#')) == fragment);
                assert!(found, "{path}: the link {link} names no heading of {}", target.display());
            }
        }
    }
}
