//! Redis key names and owner tokens.
//!
//! A user key never reaches Redis: it is hashed, so Redis (and anything that
//! reads its keyspace, its slow log or its MONITOR stream) only ever sees
//! `<namespace>:lock:{<sha256hex(key)>}`, `<namespace>:lock-fence:{<sha256hex(key)>}`
//! and, while another process waits, `<namespace>:lock-waiting:{<sha256hex(key)>}`;
//! for shared and counted holds also `<namespace>:lock-kind:{...}` (the key's
//! limit and held units) and, while a writer or a counted request waits,
//! `<namespace>:lock-queue:{...}` (their marks). The digest in braces is a
//! hash tag: Redis Cluster puts the names of one user key in one slot, so one
//! script can touch them all.

use sha2::{Digest, Sha256};

use crate::error::{ErrorCode, LockError, Result};

/// The Redis names of one user key in one namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RedisKeys {
    /// Holds the owner token, with `PX leaseMs` (a plain lease), or the
    /// shared or counted holders: a sorted set of `<token>:<s|weight>`
    /// scored by expiry (see the kinds scripts).
    pub lock: String,
    /// The fencing counter; never expires.
    pub fence: String,
    /// Exists (with a TTL) while some acquire waits for the lock: only then
    /// does a release publish a wake-up.
    pub waiting: String,
    /// While shared or counted holders (or waiters) exist: a hash of the
    /// key's `limit` and held `units`.
    pub kind: String,
    /// While a writer or a counted request waits: a sorted set of its marks.
    pub queue: String,
}

impl RedisKeys {
    pub fn new(namespace: &str, key: &str) -> RedisKeys {
        let digest = hex(&Sha256::digest(key.as_bytes()));
        RedisKeys {
            lock: format!("{namespace}:lock:{{{digest}}}"),
            fence: format!("{namespace}:lock-fence:{{{digest}}}"),
            waiting: format!("{namespace}:lock-waiting:{{{digest}}}"),
            kind: format!("{namespace}:lock-kind:{{{digest}}}"),
            queue: format!("{namespace}:lock-queue:{{{digest}}}"),
        }
    }
}

/// The channel a namespace's releases are published on; the message is the
/// released lock key (hashed, never the user key).
pub(crate) fn release_channel(namespace: &str) -> String {
    format!("{namespace}:lock-released")
}

/// A fresh owner token: 128 bits from the operating system's CSPRNG, as hex.
pub(crate) fn owner_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|err| LockError::new(ErrorCode::ProviderFailed, format!("the operating system's random source failed: {err}")))?;
    Ok(hex(&bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)] as char);
        out.push(DIGITS[usize::from(byte & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_names_hash_the_key_with_sha256() {
        // sha256("abc"), a published test vector.
        let keys = RedisKeys::new("ns", "abc");
        assert_eq!(keys.lock, "ns:lock:{ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}");
        assert_eq!(keys.fence, "ns:lock-fence:{ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}");
        assert_eq!(keys.waiting, "ns:lock-waiting:{ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}");
        assert_eq!(keys.kind, "ns:lock-kind:{ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}");
        assert_eq!(keys.queue, "ns:lock-queue:{ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}");
    }

    #[test]
    fn owner_tokens_are_128_bit_and_fresh() {
        let (a, b) = (owner_token().unwrap(), owner_token().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
