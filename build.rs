//! Build-time generation of the artifacts derived from the code:
//! `options.schema.json` from the option declaration, and the C header
//! `include/lock.h` from `src/capi/` (cbindgen, pinned in Cargo.toml).

use std::fs;
use std::path::Path;

#[path = "src/options/declaration.rs"]
#[allow(dead_code)] // build.rs reads the tables through json_schema() only
mod declaration;

fn main() {
    println!("cargo:rerun-if-changed=src/options/declaration.rs");
    write_if_changed("options.schema.json", &(serde_json::to_string_pretty(&declaration::json_schema()).expect("schema serializes") + "\n"));

    println!("cargo:rerun-if-changed=src/capi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let header = c_header();
    let out_dir = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    fs::write(Path::new(&out_dir).join("lock.h"), &header).expect("OUT_DIR is writable");
    write_if_changed("include/lock.h", &header);

    // The C library's soname; scripts/build-c stages libdokebi_lock.so under it.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,liblock.so.0");
    }
}

/// `include/lock.h` as cbindgen writes it from `src/capi/`.
fn c_header() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(root.join("cbindgen.toml")).expect("cbindgen.toml is valid");
    let mut header = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/capi/mod.rs"))
        .generate()
        .expect("cbindgen parses src/capi")
        .write(&mut header);
    String::from_utf8(header).expect("cbindgen writes UTF-8")
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
