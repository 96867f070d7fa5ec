//! Redis key names.
//!
//! A user key never reaches Redis: it is hashed, so Redis (and anything that
//! reads its keyspace, its slow log or its MONITOR stream) only ever sees
//! `<namespace>:lock:{<digest>}`, `<namespace>:lock-fence:{<digest>}` (kept for
//! `fenceRetentionMs` after the key's last grant) and, while another process
//! waits, `<namespace>:lock-waiting:{<digest>}`; for shared and counted holds
//! also `<namespace>:lock-kind:{<digest>}` (the key's limit and held units)
//! and, while a writer or a counted request waits,
//! `<namespace>:lock-queue:{<digest>}` (their marks); with `replicaAcks`
//! on a Cluster, `<namespace>:lock-acks:{<digest>}` for a second after a
//! grant or renewal (what its `WAIT` writes). Every one of them has a TTL.
//! The digest is the first 132 bits of SHA-256 of the key in 22 base64url
//! characters (`A-Z a-z 0-9 - _`); in braces it is a hash tag: Redis Cluster
//! puts the names of one user key in one slot, so one script can touch them
//! all.
//!
//! The layout before this one (0.4.1 before its release) spelled the whole
//! digest in 64 hex digits: its names and this layout's never coincide, and
//! [`is_older_layout`] recognises the older ones in a release message.

use sha2::{Digest, Sha256};

/// The Redis names of one user key in one namespace, in one buffer (one
/// allocation per key, where five formatted names cost five and their
/// growth on every acquire):
/// - `lock` holds the owner token, with `PX leaseMs` (a plain lease), or the
///   shared or counted holders: a sorted set of `<token>:<s|weight>` scored
///   by expiry (see the kinds scripts);
/// - `fence`, the fencing counter, expires `fenceRetentionMs` past its
///   value, in ms (each grant sets it again so): after the key's last
///   grant, or after the clock passed a counter ahead of it;
/// - `waiting` exists (with a TTL) while some acquire waits for the lock:
///   only then does a release publish a wake-up; behind a plain holder it
///   is a sorted set of the waiters' marks, which a release reads to hand
///   the key to the oldest (see the scripts);
/// - `kind`, while shared or counted holders (or waiters) exist: a hash of
///   the key's `limit` and held `units`;
/// - `queue`, while a writer or a counted request waits: a sorted set of
///   its marks.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RedisKeys {
    names: String,
    /// Where each name ends in `names`, in the order above.
    ends: [usize; 5],
}

/// The names' infixes, in the order of [`RedisKeys::all`].
const INFIXES: [&str; 5] = [":lock:{", ":lock-fence:{", ":lock-waiting:{", ":lock-kind:{", ":lock-queue:{"];

impl RedisKeys {
    pub fn new(namespace: &str, key: &str) -> RedisKeys {
        // The digest is spelled once and copied into each name: pushed a
        // character at a time five times over, it cost more than the hash.
        let mut digits = [0u8; DIGEST_CHARS];
        let digest = base64url_into(&mut digits, &Sha256::digest(key.as_bytes()));
        let fixed: usize = INFIXES.iter().map(|infix| infix.len()).sum();
        let mut names = String::with_capacity(5 * (namespace.len() + digest.len() + 1) + fixed);
        let mut ends = [0; 5];
        for (infix, end) in INFIXES.iter().zip(&mut ends) {
            names.push_str(namespace);
            names.push_str(infix);
            names.push_str(digest);
            names.push('}');
            *end = names.len();
        }
        RedisKeys { names, ends }
    }

    /// Every name: lock, fence, waiting, kind, queue (the order the
    /// scripts take them in).
    pub fn all(&self) -> [&str; 5] {
        [0, 1, 2, 3, 4].map(|i| self.name(i))
    }

    pub fn lock(&self) -> &str {
        self.name(0)
    }

    pub fn waiting(&self) -> &str {
        self.name(2)
    }

    pub fn queue(&self) -> &str {
        self.name(4)
    }

    /// `<namespace>:lock-acks:{<digest>}`, in the names' slot: what a
    /// `WAIT` for `replicaAcks` publishes on (on a Cluster, sets) first, so
    /// it counts from past the script's write (see
    /// `RedisConnection::wait_for_replicas`). Built from
    /// the lock name's parts: a namespace may itself hold `:lock:{`.
    pub fn acks(&self) -> String {
        let lock = self.lock();
        let namespace = &lock[..lock.len() - INFIXES[0].len() - DIGEST_CHARS - 1];
        let digest = &lock[lock.len() - DIGEST_CHARS - 1..lock.len() - 1];
        format!("{namespace}:lock-acks:{{{digest}}}")
    }

    fn name(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.names[start..self.ends[i]]
    }
}

/// Characters of the digest in every name: 22 base64url characters carry
/// 132 bits of the key's SHA-256.
const DIGEST_CHARS: usize = 22;

/// True when `lock_key` (a name from a release message) is a lock name of
/// the older layout: a 64-hex-digit digest where this layout has 22
/// base64url characters. A process that publishes one shares the namespace
/// and grants by other names: it and this one could hold one key at once.
pub(crate) fn is_older_layout(lock_key: &str) -> bool {
    let Some(tag) = lock_key.rsplit_once('{').and_then(|(_, tag)| tag.strip_suffix('}')) else {
        return false;
    };
    tag.len() == 64 && tag.bytes().all(|c| c.is_ascii_hexdigit())
}

/// The first `out.len()` base64url characters (RFC 4648 §5, no padding) of
/// `bytes`, written into `out`; `bytes` holds at least `out.len() * 6` bits.
fn base64url_into<'a>(out: &'a mut [u8], bytes: &[u8]) -> &'a str {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    for (n, c) in out.iter_mut().enumerate() {
        let bit = n * 6;
        let pair = u16::from(bytes[bit / 8]) << 8 | u16::from(bytes.get(bit / 8 + 1).copied().unwrap_or(0));
        *c = ALPHABET[usize::from((pair >> (10 - bit % 8)) & 0x3f)];
    }
    std::str::from_utf8(out).expect("base64url characters are ASCII")
}

/// The channel a namespace's releases are published on; the message is the
/// released lock key (hashed, never the user key).
pub(crate) fn release_channel(namespace: &str) -> String {
    format!("{namespace}:lock-released")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_names_hash_the_key_with_sha256_in_22_base64url_characters() {
        // sha256("abc"), a published test vector: ba7816bf8f01cfea414140de5d...,
        // whose base64url spelling begins ungWv48Bz-pBQUDeXa4iI7...
        let keys = RedisKeys::new("ns", "abc");
        let [lock, fence, waiting, kind, queue] = keys.all();
        assert_eq!(lock, "ns:lock:{ungWv48Bz-pBQUDeXa4iI7}");
        assert_eq!(fence, "ns:lock-fence:{ungWv48Bz-pBQUDeXa4iI7}");
        assert_eq!(waiting, "ns:lock-waiting:{ungWv48Bz-pBQUDeXa4iI7}");
        assert_eq!(kind, "ns:lock-kind:{ungWv48Bz-pBQUDeXa4iI7}");
        assert_eq!(queue, "ns:lock-queue:{ungWv48Bz-pBQUDeXa4iI7}");
        assert_eq!((keys.lock(), keys.waiting(), keys.queue()), (lock, waiting, queue));
        assert_eq!(keys.acks(), "ns:lock-acks:{ungWv48Bz-pBQUDeXa4iI7}");
        // A namespace that holds the lock name's infix keeps it.
        assert_eq!(RedisKeys::new("a:lock:{t}", "abc").acks(), "a:lock:{t}:lock-acks:{ungWv48Bz-pBQUDeXa4iI7}");
    }

    #[test]
    fn lock_names_of_the_older_layout_are_told_apart() {
        assert!(is_older_layout("ns:lock:{ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad}"));
        assert!(!is_older_layout(RedisKeys::new("ns", "abc").lock()));
        assert!(!is_older_layout("ns:lock:{not-a-digest}"));
    }
}
