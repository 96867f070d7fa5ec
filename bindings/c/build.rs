//! Generates the C header `include/lock.h` (at the repository root) from
//! this crate's source with cbindgen (pinned in Cargo.toml), and sets the
//! shared library's soname.

use std::fs;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let header = c_header();
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    fs::write(Path::new(&out_dir).join("lock.h"), &header).expect("OUT_DIR is writable");
    write_if_changed(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../include/lock.h"), &header);

    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblock.so.0");
    }
}

/// `include/lock.h` as cbindgen writes it from `src/`.
fn c_header() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml is valid");
    let mut header = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses src/")
        .write(&mut header);
    String::from_utf8(header).expect("cbindgen writes UTF-8")
}

/// Rewrites the header only when its content changes, so builds stay
/// incremental; a read-only source tree is left alone and scripts/test-c
/// reports any difference.
fn write_if_changed(path: &Path, content: &str) {
    if fs::read_to_string(path).ok().as_deref() != Some(content) {
        if let Some(dir) = path.parent() {
            let _ = fs::create_dir_all(dir);
        }
        let _ = fs::write(path, content);
    }
}
