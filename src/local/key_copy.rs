//! A copy of a key that allocates only for long keys: the engine's entry of
//! a held key, and a lease's own copy (so that `key()` answers after the
//! lease ended, when the engine has forgotten the key).
//!
//! Keys of up to [`INLINE`] bytes, most keys in practice ("order:1234", a
//! prefix and a UUID), are kept inline: an uncontended acquire and release
//! of such a key then allocates nothing. Longer keys are boxed.

/// The longest key kept without an allocation; the copy is then 48 bytes,
/// three times a boxed one.
pub(crate) const INLINE: usize = 46;

pub(crate) enum KeyCopy {
    Inline { len: u8, bytes: [u8; INLINE] },
    Boxed(Box<str>),
}

impl KeyCopy {
    pub fn new(key: &str) -> KeyCopy {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                bytes[..key.len()].copy_from_slice(key.as_bytes());
                KeyCopy::Inline { len, bytes }
            }
            _ => KeyCopy::Boxed(key.into()),
        }
    }

    /// Whether this is a copy of `key` (bytes compared: no UTF-8 check on
    /// the engine's lookups).
    pub fn is(&self, key: &str) -> bool {
        self.as_bytes() == key.as_bytes()
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            KeyCopy::Inline { len, bytes } => &bytes[..usize::from(*len)],
            KeyCopy::Boxed(key) => key.as_bytes(),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // Copied from a `str`, so this cannot fail; checking costs a few
            // nanoseconds on calls off the acquire path (a lease's `key()`,
            // the engine's `key_of`).
            KeyCopy::Inline { .. } => std::str::from_utf8(self.as_bytes()).expect("copied from a str"),
            KeyCopy::Boxed(key) => key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_keys_read_back_as_given() {
        let at_limit = "é".repeat(INLINE / 2);
        let over = format!("{at_limit}x");
        for key in ["k", "order:1234", "日本語のキー", at_limit.as_str(), over.as_str(), &"x".repeat(1024)] {
            assert_eq!(KeyCopy::new(key).as_str(), key);
            assert!(KeyCopy::new(key).is(key));
            assert!(!KeyCopy::new(key).is(&format!("{key}!")));
        }
        assert!(matches!(KeyCopy::new(&at_limit), KeyCopy::Inline { .. }));
        assert!(matches!(KeyCopy::new(&over), KeyCopy::Boxed(_)));
        assert_eq!(std::mem::size_of::<KeyCopy>(), 48);
    }
}
