//! An earlier build's source, read from git, for the tests that run its SQL
//! beside this build's (reviews of an upgrade: `review_r64`, `review_r68`).

#![allow(dead_code)]

/// The file at `path` as commit `commit` had it (`git show`, run in the
/// package's directory, so a test's working directory does not matter).
pub fn source_at(commit: &str, path: &str) -> String {
    let out = std::process::Command::new("git")
        .args(["show", &format!("{commit}:{path}")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "git show {commit}:{path}");
    String::from_utf8(out.stdout).unwrap()
}

/// A `const NAME: &str = ...;` of `src`: a raw string or a plain one
/// (without escapes).
pub fn constant(src: &str, name: &str) -> String {
    let head = format!("const {name}: &str = ");
    let start = src.find(&head).unwrap_or_else(|| panic!("no {name}")) + head.len();
    let rest = &src[start..];
    if let Some(raw) = rest.strip_prefix("r#\"") {
        raw[..raw.find("\"#;").unwrap()].to_owned()
    } else {
        let plain = &rest[1..];
        plain[..plain.find("\";").unwrap()].to_owned()
    }
}
