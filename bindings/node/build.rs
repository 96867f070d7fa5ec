//! Build script: napi-rs link setup for the Node addon, plus what the
//! published binaries of each OS need.
fn main() {
    napi_build::setup();
    match std::env::var("CARGO_CFG_TARGET_OS").as_deref() {
        // The addon's own install name, instead of the build machine's path.
        Ok("macos") => println!("cargo:rustc-cdylib-link-arg=-Wl,-install_name,@rpath/dokebi-lock.node"),
        // Export only what the addon declares (napi_register_module_v1), not
        // every symbol, as MinGW linkers do when nothing is marked.
        Ok("windows") => println!("cargo:rustc-cdylib-link-arg=-Wl,--exclude-all-symbols"),
        _ => {}
    }
}
