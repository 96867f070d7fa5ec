//! The options file as YAML text (`Options::from_yaml`): whatever the bytes,
//! the answer is options or an options error listing its issues, never a
//! panic, and quickly (scripts/fuzz runs this with a per-input timeout).
//!
//! One more check: a text with no alias (`*`) can never be "nested too deep
//! once aliases are expanded". That would mean the pre-parse scan counted
//! less nesting than the parser built, so the parser (whose cost grows with
//! the square of the flow depth) saw text past the limit.
#![no_main]

use dokebi_lock::{ErrorCode, Options};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The loader takes text; non-UTF-8 bytes are read lossily so that the
    // mutator's byte flips still reach the scan and the parser.
    let text = String::from_utf8_lossy(data);
    let Err(err) = Options::from_yaml(&text) else { return };
    match err.code() {
        ErrorCode::InvalidOptions | ErrorCode::UnknownConnection => {}
        other => panic!("from_yaml answered {other}: {err}"),
    }
    let issues = err.issues();
    assert!(!issues.is_empty(), "an options error lists its issues: {err}");
    if !text.contains('*') {
        for issue in &issues {
            assert!(
                !issue.message.contains("once aliases are expanded"),
                "the scan let through text the parser nests past the limit (no alias in it): {issue}"
            );
        }
    }
});
