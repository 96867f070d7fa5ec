//! Owner tokens: what every store-backed driver's claim carries to tell its
//! holder from any other, so that a release or renew of a lease that was
//! lost (expired, taken over) is refused instead of freeing another's.

use crate::error::{ErrorCode, LockError, Result};

/// A fresh owner token: 128 bits from the operating system's CSPRNG, as hex.
pub(crate) fn owner_token() -> Result<String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|err| LockError::new(ErrorCode::ProviderFailed, format!("the operating system's random source failed: {err}")))?;
    let mut digits = [0u8; 32];
    Ok(hex_into(&mut digits, &bytes).to_owned())
}

/// `bytes` in lowercase hex, written into `out` (twice as long as `bytes`).
fn hex_into<'a>(out: &'a mut [u8], bytes: &[u8]) -> &'a str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
    std::str::from_utf8(out).expect("hex digits are ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_tokens_are_128_bit_and_fresh() {
        let (a, b) = (owner_token().unwrap(), owner_token().unwrap());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
