//! The README's two commands work on a fresh machine with nothing run before:
//! each installs what it needs (`scripts/setup`) before it does anything else.
//! (`scripts/setup` itself is idempotent; a fresh clone runs both for real.)

use std::path::Path;

fn script(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The script's commands, without comments, blank lines, `set` and the
/// lines that find and enter the checkout (`root=...`, `cd "$root"`).
fn commands(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter(|line| !line.starts_with("set ") && !line.starts_with("root=") && *line != "cd \"$root\"")
        .collect()
}

#[test]
fn the_readme_commands_run_setup_before_anything_else() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for name in ["example", "test"] {
        assert!(readme.contains(&format!("| `bash scripts/{name}` |")), "README's table of the two commands lacks scripts/{name}");
        let text = script(name);
        let first = commands(&text).first().copied().unwrap_or_default();
        assert!(
            first.starts_with("bash scripts/setup"),
            "scripts/{name} must run scripts/setup before anything else (a fresh machine has no Node 24 yet); it starts with `{first}`"
        );
    }
}
