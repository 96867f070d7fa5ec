//! Build-time generation of what the core derives from its code:
//! `options.schema.json` from the option declaration. (The C header is the
//! C crate's, `bindings/c/build.rs`.)

use std::fs;
use std::path::Path;

#[path = "src/options/declaration.rs"]
#[allow(dead_code)] // build.rs reads the tables through json_schema() only
mod declaration;

fn main() {
    println!("cargo:rerun-if-changed=src/options/declaration.rs");
    write_if_changed(
        "options.schema.json",
        &(serde_json::to_string_pretty(&declaration::json_schema()).expect("schema serializes") + "\n"),
    );
}
/// Rewrites a generated file only when its content changes, so builds stay
/// incremental; a read-only source tree (a packaged crate) is left alone and
/// the drift tests report any difference.
fn write_if_changed(relative: &str, content: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    if fs::read_to_string(&path).ok().as_deref() != Some(content) {
        if let Some(dir) = path.parent() {
            let _ = fs::create_dir_all(dir);
        }
        let _ = fs::write(&path, content);
    }
}
