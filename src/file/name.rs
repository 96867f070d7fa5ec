//! Lock file names: a digest of the namespace and the key, never the key.
//!
//! A key may carry user data (e-mail addresses, order numbers), and file
//! names show up in `ls`, in backups and in audit logs, so the name of a
//! key's lock file is the first 128 bits of SHA-256 over the namespace and
//! the key, in hex: `<32 hex digits>.lock`. Two keys share a file only if
//! their digests collide.

use sha2::{Digest, Sha256};

/// The lock file name of one key in one namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct LockName([u8; 16]);

/// The suffix of every lock file the driver creates.
pub(crate) const SUFFIX: &str = ".lock";

/// The directory's fence floor (see [`super::floor`]): no key's file takes
/// this name, as theirs begin with 32 hex digits.
pub(crate) const FLOOR_FILE: &str = "floor.lock";

impl LockName {
    /// The name of `key`'s lock file in `namespace`.
    pub fn new(namespace: &str, key: &str) -> LockName {
        let mut hasher = Sha256::new();
        hasher.update((namespace.len() as u64).to_le_bytes());
        hasher.update(namespace.as_bytes());
        hasher.update(key.as_bytes());
        let digest = hasher.finalize();
        let mut name = [0; 16];
        name.copy_from_slice(&digest[..16]);
        LockName(name)
    }

    /// The file name: 32 lowercase hex digits and [`SUFFIX`].
    pub fn file_name(&self) -> String {
        let mut name = self.digest();
        name.push_str(SUFFIX);
        name
    }

    /// The file of unit `unit` of a counted key: the digest, `.u<unit>` and
    /// [`SUFFIX`].
    pub fn unit_file_name(&self, unit: u32) -> String {
        format!("{}.u{unit}{SUFFIX}", self.digest())
    }

    /// The raise file of a key, locked by its readers while they raise its
    /// counter (see [`super::raise`]): the digest, `.raise` and [`SUFFIX`].
    pub fn raise_file_name(&self) -> String {
        format!("{}.raise{SUFFIX}", self.digest())
    }

    fn digest(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut name = String::with_capacity(48);
        for byte in self.0 {
            name.push(HEX[usize::from(byte >> 4)] as char);
            name.push(HEX[usize::from(byte & 15)] as char);
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_a_digest_and_never_contains_the_key() {
        let name = LockName::new("ns", "user@example.com").file_name();
        assert_eq!(name.len(), 32 + SUFFIX.len());
        assert!(!name.contains("user"));
        assert!(name[..32].bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn namespaces_and_keys_give_different_names() {
        assert_ne!(LockName::new("a", "k"), LockName::new("b", "k"));
        assert_ne!(LockName::new("a", "k"), LockName::new("a", "j"));
        // The namespace's length is hashed: "ab"+"c" is not "a"+"bc".
        assert_ne!(LockName::new("ab", "c"), LockName::new("a", "bc"));
        assert_eq!(LockName::new("a", "k"), LockName::new("a", "k"));
    }
}
