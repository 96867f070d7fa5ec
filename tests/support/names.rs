//! The Redis names of a user key, as the redis driver derives them: the
//! tests that look at a server's keys, and the harnesses that read what a
//! server was sent, find a key's names by them.

use sha2::{Digest, Sha256};

/// The Redis name of a user key's lock under `namespace`.
pub fn lock_key(namespace: &str, key: &str) -> String {
    format!("{namespace}:lock:{{{}}}", digest(key))
}

/// The digest in a user key's Redis names (its hash tag): the first 132
/// bits of its SHA-256 in 22 base64url characters.
pub fn digest(key: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = Sha256::digest(key.as_bytes());
    let mut out = String::new();
    for n in 0..22 {
        let bit = n * 6;
        let pair = u16::from(bytes[bit / 8]) << 8 | u16::from(bytes[bit / 8 + 1]);
        out.push(char::from(ALPHABET[usize::from((pair >> (10 - bit % 8)) & 0x3f)]));
    }
    out
}
