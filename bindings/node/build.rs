//! Build script: napi-rs link setup for the Node addon, plus what the
//! published binaries of each OS need.
fn main() {
    napi_build::setup();
    // The addon's own install name, instead of the build machine's path.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("macos") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-install_name,@rpath/dokebi-lock.node");
    }
}
