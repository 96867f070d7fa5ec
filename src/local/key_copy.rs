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
    #[inline]
    pub fn new(key: &str) -> KeyCopy {
        match u8::try_from(key.len()) {
            Ok(len) if key.len() <= INLINE => {
                let mut bytes = [0; INLINE];
                copy_short(&mut bytes, key.as_bytes());
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

/// Copies `from` (at most [`INLINE`] bytes) to the start of `to` with two
/// overlapping moves of a fixed width, chosen by its length: a copy of a
/// length known only at run time is otherwise a call to `memcpy`, which
/// cost more than the rest of making the copy (two copies per acquire).
#[inline(always)]
fn copy_short(to: &mut [u8; INLINE], from: &[u8]) {
    let len = from.len();
    match len {
        0 => {}
        1..=3 => {
            to[0] = from[0];
            to[len / 2] = from[len / 2];
            to[len - 1] = from[len - 1];
        }
        4..=7 => {
            to[..4].copy_from_slice(&from[..4]);
            to[len - 4..len].copy_from_slice(&from[len - 4..]);
        }
        8..=16 => {
            to[..8].copy_from_slice(&from[..8]);
            to[len - 8..len].copy_from_slice(&from[len - 8..]);
        }
        17..=32 => {
            to[..16].copy_from_slice(&from[..16]);
            to[len - 16..len].copy_from_slice(&from[len - 16..]);
        }
        _ => {
            to[..32].copy_from_slice(&from[..32]);
            to[len - 16..len].copy_from_slice(&from[len - 16..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_every_inline_length_read_back_as_given() {
        let text: String = ('a'..='z').chain('A'..='Z').collect();
        for len in 1..=INLINE {
            let key = &text[..len];
            let copy = KeyCopy::new(key);
            assert!(matches!(copy, KeyCopy::Inline { .. }));
            assert_eq!(copy.as_str(), key, "{len}");
        }
    }

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
