//! Owner tokens: what every store-backed driver's claim carries to tell its
//! holder from any other, so that a release or renew of a lease that was
//! lost (expired, taken over) is refused instead of freeing another's.
//!
//! A token is `<random>.<label>`: 128 bits from the operating system's
//! CSPRNG in base64url (22 characters), a dot, and the provider's holder
//! label as [`crate::holder`] encodes it. Every character is one of
//! `A-Z a-z 0-9 - _ . ~ %`: none means anything to a store's protocol, and
//! a token fits MySQL's 64-byte column. Tokens of releases before the
//! labels (32 hex digits, no dot) carry no label and are read as such.

use crate::error::{ErrorCode, LockError, Result};
use crate::holder::{self, HolderLabel};

/// Characters of the random part (base64url, RFC 4648 §5).
const DIGITS: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// The random part's length: 128 bits, six to a character.
const RANDOM_CHARS: usize = 22;

/// A fresh owner token of `holder`.
pub(crate) fn owner_token(holder: &HolderLabel) -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|err| LockError::new(ErrorCode::ProviderFailed, format!("the operating system's random source failed: {err}")))?;
    let bits = u128::from_le_bytes(bytes);
    let mut token = String::with_capacity(RANDOM_CHARS + 1 + holder.encoded().len());
    token.extend((0..RANDOM_CHARS).map(|at| char::from(DIGITS[((bits >> (6 * at)) & 63) as usize])));
    token.push('.');
    token.push_str(holder.encoded());
    Ok(token)
}

/// The holder label a token carries; `None` for a token without one (an
/// older release's) or one that is not ours.
pub(crate) fn label_of(token: &str) -> Option<String> {
    let (random, label) = token.split_once('.')?;
    (random.len() == RANDOM_CHARS).then(|| holder::decode(label))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_tokens_are_128_bit_fresh_and_carry_the_label() {
        let holder = HolderLabel::new("web-3:4182").unwrap();
        let (a, b) = (owner_token(&holder).unwrap(), owner_token(&holder).unwrap());
        assert_ne!(a, b);
        assert_eq!(a.len(), RANDOM_CHARS + 1 + "web-3%3A4182".len());
        assert!(a[..RANDOM_CHARS].bytes().all(|c| DIGITS.contains(&c)));
        assert!(a.ends_with(".web-3%3A4182"), "{a}");
        assert_eq!(label_of(&a).as_deref(), Some("web-3:4182"));
    }

    #[test]
    fn the_longest_label_fits_a_64_byte_column() {
        let holder = HolderLabel::new(&"x".repeat(crate::holder::MAX_HOLDER_BYTES)).unwrap();
        assert_eq!(owner_token(&holder).unwrap().len(), 63);
    }

    #[test]
    fn tokens_without_a_label_read_as_none() {
        assert_eq!(label_of("0123456789abcdef0123456789abcdef"), None);
        assert_eq!(label_of("short.web"), None);
        assert_eq!(label_of("AAAAAAAAAAAAAAAAAAAAAA.a%zz"), None);
    }
}
