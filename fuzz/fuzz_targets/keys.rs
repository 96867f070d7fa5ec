//! The key rules (`dokebi_lock::key`): `validate`, `from_utf8`,
//! `from_utf16` and `from_utf16_into` never panic, accept exactly the
//! non-empty well-formed keys without U+0000 of at most `maxKeyBytes` UTF-8
//! bytes, agree with each other (a well-formed UTF-16 key and its UTF-8 form are accepted
//! or rejected alike, with the same message), answer only `INVALID_KEY`, and
//! never put the key in a message.
//!
//! Input: one byte choosing `maxKeyBytes`, then the key bytes, read both as
//! UTF-8 and as little-endian UTF-16 units.
#![no_main]

use dokebi_lock::{key, ErrorCode, LockError};
use libfuzzer_sys::fuzz_target;

/// The only messages a key error may carry: none of them quotes the key.
fn check_error(err: &LockError, utf8_len: Option<usize>, max: usize) {
    assert_eq!(err.code(), ErrorCode::InvalidKey, "{err}");
    let message = err.message();
    let too_long = utf8_len.map(|len| format!("key is {len} bytes of UTF-8, more than maxKeyBytes ({max})"));
    assert!(
        message == "key is empty"
            || message == "key is not valid UTF-8"
            || message == "key is not well-formed UTF-16 (it contains a lone surrogate)"
            || message == "key contains U+0000 (NUL), which no driver takes in a key"
            || Some(message) == too_long.as_deref(),
        "unexpected key error message: {message:?}"
    );
}

fn max_key_bytes(selector: u8) -> usize {
    match selector {
        255 => usize::MAX,
        254 => 1_048_576,
        253 => 0,
        n => usize::from(n % 64) + 1,
    }
}

/// `from_utf16_into` with a buffer that held another key before.
fn into_reused(units: &[u16], max: usize) -> (Result<(), LockError>, String) {
    let mut buffer = String::from("an earlier, longer key \u{1F600}");
    let outcome = key::from_utf16_into(units, max, &mut buffer);
    (outcome, buffer)
}

fn check_utf16(units: &[u16], max: usize) {
    let expected = String::from_utf16(units).ok();
    let converted = key::from_utf16(units, max);
    let (into, buffer) = into_reused(units, max);
    match &expected {
        Some(text) if !text.is_empty() && text.len() <= max && !text.contains('\0') => {
            assert_eq!(converted.as_deref().ok(), Some(text.as_str()), "from_utf16 rejected a valid key");
            assert!(into.is_ok(), "from_utf16_into rejected a valid key");
            assert_eq!(&buffer, text, "from_utf16_into left another key in the buffer");
        }
        _ => {
            let err = converted.expect_err("from_utf16 accepted an invalid key");
            check_error(&err, expected.as_ref().map(String::len), max);
            let err_into = into.expect_err("from_utf16_into accepted an invalid key");
            assert_eq!(err.message(), err_into.message(), "the two UTF-16 entry points disagree");
        }
    }
    // A well-formed UTF-16 key and its UTF-8 form are treated alike.
    if let Some(text) = expected {
        let utf8 = key::from_utf8(text.as_bytes(), max);
        let utf16 = key::from_utf16(units, max);
        match (utf8, utf16) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!(a.message(), b.message(), "UTF-8 and UTF-16 reject one key differently"),
            (a, b) => panic!("UTF-8 and UTF-16 disagree on one key: {:?} vs {:?}", a.is_ok(), b.is_ok()),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, bytes)) = data.split_first() else { return };
    let max = max_key_bytes(selector);

    // UTF-8 (the C surface).
    let expected = std::str::from_utf8(bytes).ok();
    match key::from_utf8(bytes, max) {
        Ok(key) => {
            assert_eq!(Some(key), expected, "from_utf8 accepted bytes that are not that UTF-8 text");
            assert!(!key.is_empty() && key.len() <= max && !key.contains('\0'));
        }
        Err(err) => {
            check_error(&err, expected.map(str::len), max);
            if let Some(text) = expected {
                assert!(text.is_empty() || text.len() > max || text.contains('\0'), "from_utf8 rejected a valid key");
            }
        }
    }
    if let Some(text) = expected {
        // validate (Rust strings) agrees with from_utf8 on the same text.
        let validated = key::validate(text, max);
        let read = key::from_utf8(bytes, max);
        assert_eq!(validated.is_ok(), read.is_ok(), "validate and from_utf8 disagree");
        if let (Err(a), Err(b)) = (&validated, &read) {
            assert_eq!(a.message(), b.message());
        }
        // The same text as UTF-16 (the Node surface).
        let units: Vec<u16> = text.encode_utf16().collect();
        check_utf16(&units, max);
    }

    // The bytes as UTF-16 units: lone surrogates, pairs, ASCII runs.
    let units: Vec<u16> = bytes.chunks_exact(2).map(|pair| u16::from_le_bytes([pair[0], pair[1]])).collect();
    check_utf16(&units, max);
});
