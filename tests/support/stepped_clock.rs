//! A private server whose wall clock a test steps (libfaketime), for the
//! reviews of what a clock stepped back does (tests/review_r1.rs,
//! tests/review_r5.rs). Included by `#[path]`: only those tests build it.

use std::path::PathBuf;

/// A server that `start` starts with a clock of libfaketime's, offset by
/// what the returned file says (`+0` at the start; `-5` puts it 5 s back),
/// read afresh at every clock call. The monotonic clock is left alone.
pub fn with_a_clock_to_step<T>(name: &str, start: impl FnOnce() -> T) -> (T, PathBuf) {
    let offset = std::env::temp_dir().join(format!("dokebi-faketime-{name}-{}", std::process::id()));
    std::fs::write(&offset, "+0\n").unwrap();
    // Only the server inherits them: the environment is the process's, so
    // servers start one at a time (these tests start no other process).
    static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = STARTING.lock().unwrap_or_else(|e| e.into_inner());
    let preload = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";
    let vars = [
        ("LD_PRELOAD", preload.to_owned()),
        ("FAKETIME_TIMESTAMP_FILE", offset.display().to_string()),
        ("FAKETIME_NO_CACHE", "1".to_owned()),
        ("FAKETIME_DONT_FAKE_MONOTONIC", "1".to_owned()),
    ];
    for (name, value) in &vars {
        std::env::set_var(name, value);
    }
    let server = start();
    for (name, _) in &vars {
        std::env::remove_var(name);
    }
    (server, offset)
}
