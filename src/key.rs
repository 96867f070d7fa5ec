//! Lock key rules, shared by every driver and surface.
//!
//! A key is non-empty, well-formed Unicode without U+0000, and at most
//! `maxKeyBytes` bytes of UTF-8. Surfaces hand keys over in their native encoding (Rust `&str`, Node
//! UTF-16, C bytes); each entry point here validates one encoding. Errors never
//! echo the key.

use crate::error::{ErrorCode, LockError, Result};

/// Checks a key that is already a Rust string (so already valid UTF-8).
#[inline]
pub fn validate(key: &str, max_key_bytes: usize) -> Result<()> {
    check(key, max_key_bytes)
}

/// Converts UTF-16 code units (Node strings) into a key; a lone surrogate is
/// `INVALID_KEY`.
pub fn from_utf16(units: &[u16], max_key_bytes: usize) -> Result<String> {
    let mut key = String::with_capacity(units.len());
    from_utf16_into(units, max_key_bytes, &mut key)?;
    Ok(key)
}

/// [`from_utf16`] into a buffer the caller reuses (the Node surface's hot
/// path allocates nothing per key). `key` is cleared first.
pub fn from_utf16_into(units: &[u16], max_key_bytes: usize, key: &mut String) -> Result<()> {
    key.clear();
    // ASCII units (most keys, or their start) are pushed as they are, at
    // about twice the speed of the general decoder, which takes over from
    // the first other unit.
    let mut rest = units;
    while let [unit @ ..0x80, tail @ ..] = rest {
        key.push(char::from(*unit as u8));
        rest = tail;
    }
    for unit in char::decode_utf16(rest.iter().copied()) {
        key.push(unit.map_err(|_| LockError::new(ErrorCode::InvalidKey, "key is not well-formed UTF-16 (it contains a lone surrogate)"))?);
    }
    check(key, max_key_bytes)
}

/// Converts raw bytes (C callers) into a key; invalid UTF-8 is `INVALID_KEY`.
#[inline]
pub fn from_utf8(bytes: &[u8], max_key_bytes: usize) -> Result<&str> {
    let key = std::str::from_utf8(bytes).map_err(|_| LockError::new(ErrorCode::InvalidKey, "key is not valid UTF-8"))?;
    check(key, max_key_bytes)?;
    Ok(key)
}

// Inlined into every entry point; the errors are built out of line.
#[inline]
fn check(key: &str, max_key_bytes: usize) -> Result<()> {
    let len = key.len();
    if len == 0 {
        return Err(empty());
    }
    if len > max_key_bytes {
        return Err(too_long(len, max_key_bytes));
    }
    // PostgreSQL's text cannot hold U+0000: rather than a key one driver
    // alone refuses (as the server's error, after a round trip), every
    // driver refuses it here, before anything is sent.
    if key.as_bytes().contains(&0) {
        return Err(nul());
    }
    Ok(())
}

/// The error of a key of `len` bytes of UTF-8, more than `max_key_bytes`
/// (for a surface that measures an oversized key without converting it).
#[cold]
pub fn too_long(len: usize, max_key_bytes: usize) -> LockError {
    LockError::new(ErrorCode::InvalidKey, format!("key is {len} bytes of UTF-8, more than maxKeyBytes ({max_key_bytes})"))
        .with_details(serde_json::json!({ "bytes": len, "maxKeyBytes": max_key_bytes }))
}

#[cold]
fn empty() -> LockError {
    LockError::new(ErrorCode::InvalidKey, "key is empty")
}

#[cold]
fn nul() -> LockError {
    LockError::new(ErrorCode::InvalidKey, "key contains U+0000 (NUL), which no driver takes in a key")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_keys_are_invalid_in_every_encoding() {
        assert_eq!(validate("", 10).unwrap_err().code(), ErrorCode::InvalidKey);
        assert_eq!(from_utf16(&[], 10).unwrap_err().code(), ErrorCode::InvalidKey);
        assert_eq!(from_utf8(b"", 10).unwrap_err().code(), ErrorCode::InvalidKey);
    }

    #[test]
    fn length_limit_counts_utf8_bytes_not_characters() {
        // "é" is one UTF-16 unit but two UTF-8 bytes.
        assert!(validate("éé", 4).is_ok());
        assert_eq!(validate("ééé", 4).unwrap_err().code(), ErrorCode::InvalidKey);
        let units: Vec<u16> = "ééé".encode_utf16().collect();
        assert_eq!(from_utf16(&units, 4).unwrap_err().code(), ErrorCode::InvalidKey);
        assert_eq!(from_utf16(&units, 6).unwrap(), "ééé");
    }

    #[test]
    fn lone_surrogates_are_invalid() {
        assert_eq!(from_utf16(&[0x61, 0xD800], 100).unwrap_err().code(), ErrorCode::InvalidKey);
        assert_eq!(from_utf16(&[0xDC00, 0x61], 100).unwrap_err().code(), ErrorCode::InvalidKey);
        // A proper pair is fine: U+1F600.
        assert_eq!(from_utf16(&[0xD83D, 0xDE00], 100).unwrap(), "\u{1F600}");
    }

    #[test]
    fn keys_mixing_ascii_and_other_characters_convert_exactly() {
        for text in ["key:42", "é", "a\u{1F600}b", "\u{1F600}ab", "ab\u{FFFF}", "x\u{7F}\u{80}y"] {
            let units: Vec<u16> = text.encode_utf16().collect();
            assert_eq!(from_utf16(&units, 100).unwrap(), text);
        }
        // A lone surrogate after an ASCII start is still found.
        assert_eq!(from_utf16(&[0x61, 0x62, 0xDC00], 100).unwrap_err().code(), ErrorCode::InvalidKey);
    }

    #[test]
    fn a_reused_buffer_holds_only_the_last_key() {
        let mut key = String::new();
        from_utf16_into(&"long-key".encode_utf16().collect::<Vec<_>>(), 100, &mut key).unwrap();
        from_utf16_into(&[0x6B], 100, &mut key).unwrap();
        assert_eq!(key, "k");
        assert_eq!(from_utf16_into(&[0xD800], 100, &mut key).unwrap_err().code(), ErrorCode::InvalidKey);
    }

    #[test]
    fn u0000_is_invalid_in_every_encoding() {
        assert_eq!(validate("a\u{0}b", 10).unwrap_err().code(), ErrorCode::InvalidKey);
        assert_eq!(from_utf16(&[0x61, 0], 10).unwrap_err().code(), ErrorCode::InvalidKey);
        assert_eq!(from_utf16(&[0xE9, 0], 10).unwrap_err().code(), ErrorCode::InvalidKey);
        assert_eq!(from_utf8(b"\0", 10).unwrap_err().code(), ErrorCode::InvalidKey);
    }

    #[test]
    fn invalid_utf8_is_invalid_and_never_echoed() {
        let err = from_utf8(&[b's', b'e', b'c', 0xFF], 100).unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidKey);
        let err = validate("secret-order-42", 3).unwrap_err();
        assert!(!err.to_string().contains("secret"));
    }
}
