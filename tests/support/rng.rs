//! A tiny xorshift for the tests that draw tokens, labels and schedules
//! (no rand crate in the tests), and the owner tokens they imitate.

/// A seeded xorshift.
pub struct Rng(u64);

impl Rng {
    /// Seeded by `seed` (any value: never the all-zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number below `n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An older release's owner token: 32 hex digits.
    pub fn hex32(&mut self) -> String {
        format!("{:016x}{:016x}", self.next(), self.next())
    }

    /// `len` letters and digits.
    pub fn word(&mut self, len: usize) -> String {
        (0..len).map(|_| char::from(DIGITS[self.below(62) as usize])).collect()
    }

    /// An owner token of today's shape: 22 base64url characters, a dot,
    /// `label` (already encoded).
    pub fn token_of(&mut self, label: &str) -> String {
        let random: String = (0..22).map(|_| char::from(DIGITS[self.below(64) as usize])).collect();
        format!("{random}.{label}")
    }
}

/// Base64url's alphabet: its first 62 are letters and digits.
const DIGITS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
