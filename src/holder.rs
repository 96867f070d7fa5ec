//! Holder labels: who holds a lease, as an operator reads it in `inspect`,
//! in a `WAIT_TIMEOUT` or `LOCK_BUSY` and in the command-line tool. One
//! label per provider (`dokebi-lock.holder`; by default this host's name
//! and this process's id, `web-3:4182`).
//!
//! The store drivers keep the label inside each lease's owner token
//! (`<random>.<label>`, see `store::token`): every row, member and mark
//! that names a holder already carries its token, so the label costs no
//! write, no round trip and no column of its own, and a reader finds it
//! wherever it finds the token. The token's random part alone tells holders
//! apart, so a label, however chosen, never makes two tokens equal.
//!
//! In the token the label is percent-encoded down to `A-Z a-z 0-9 . _ ~ -`
//! and `%`: characters that mean nothing to any store's protocol (a MySQL
//! call carries tokens inside quoted text and comma-separated lists, Redis
//! marks are `<ticket>:<token>` and counted members `<token>:<weight>`).

use std::sync::Arc;

use crate::error::{ErrorCode, LockError, Result};

pub use crate::options::declaration::MAX_HOLDER_BYTES;

/// A checked holder label.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderLabel {
    label: Arc<str>,
    encoded: Arc<str>,
}

impl HolderLabel {
    /// `label` checked: not empty, no control or format characters, at most
    /// [`MAX_HOLDER_BYTES`] once encoded (letters, digits and `._~-` count
    /// one byte each, every other byte three). The error says why.
    pub fn new(label: &str) -> Result<HolderLabel, String> {
        if label.is_empty() {
            return Err("must not be empty".into());
        }
        if label.chars().any(hidden) {
            return Err("must not contain control or invisible formatting characters".into());
        }
        let encoded = encode(label);
        if encoded.len() > MAX_HOLDER_BYTES {
            return Err(format!(
                "is {} bytes as stored; at most {MAX_HOLDER_BYTES} (letters, digits and . _ ~ - count one byte, any other byte three)",
                encoded.len()
            ));
        }
        Ok(HolderLabel { label: label.into(), encoded: encoded.into() })
    }

    /// `label` as one acquire's own (`AcquireOptions::holder`), checked as
    /// [`HolderLabel::new`] checks it: `INVALID_ARGUMENT` saying why.
    pub fn of_acquire(label: &str) -> Result<HolderLabel> {
        HolderLabel::new(label).map_err(|why| LockError::new(ErrorCode::InvalidArgument, format!("holder {why}")))
    }

    /// This host's name and this process's id (`web-3:4182`), the name cut
    /// from the front where the whole would be too long (the end of a
    /// container's name is the part that tells replicas apart).
    pub fn of_this_process() -> HolderLabel {
        let pid = format!(":{}", std::process::id());
        let mut host: String = host_name().chars().filter(|c| !c.is_control()).collect();
        while !host.is_empty() && encode(&host).len() + encode(&pid).len() > MAX_HOLDER_BYTES {
            host.remove(0);
        }
        HolderLabel::new(&format!("{host}{pid}")).expect("a pid fits")
    }

    /// The label as given.
    pub fn as_str(&self) -> &str {
        &self.label
    }

    /// As a token carries it.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "file")), allow(dead_code))]
    pub(crate) fn encoded(&self) -> &str {
        &self.encoded
    }
}

impl std::fmt::Display for HolderLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

/// A byte a token carries as itself.
fn plain(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'~' | b'-')
}

fn encode(label: &str) -> String {
    let mut out = String::with_capacity(label.len());
    for byte in label.bytes() {
        if plain(byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The label an encoded one stands for; `None` when it is not one (a
/// stray `%`, bytes that are not UTF-8, longer than a label may be, a
/// control or format character: a token in a store can be written by
/// anyone who can write there, and a label is printed to operators'
/// terminals).
#[cfg_attr(not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "file")), allow(dead_code))]
pub(crate) fn decode(encoded: &str) -> Option<String> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        match bytes[at] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                at += 3;
            }
            byte if plain(byte) => {
                out.push(byte);
                at += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok().filter(|label| encoded.len() <= MAX_HOLDER_BYTES && !label.chars().any(hidden))
}

/// A character a label must not carry: a control character, or a format
/// character (Unicode's Cf: bidirectional overrides, zero-width marks), with
/// which a label forged in a store would print as another (`web-1` and a
/// right-to-left override; review R58).
fn hidden(c: char) -> bool {
    c.is_control()
        || matches!(
            u32::from(c),
            0xAD | 0x600..=0x605
                | 0x61C
                | 0x6DD
                | 0x70F
                | 0x890..=0x891
                | 0x8E2
                | 0x180E
                | 0x200B..=0x200F
                | 0x202A..=0x202E
                | 0x2060..=0x2064
                | 0x2066..=0x206F
                | 0xFEFF
                | 0xFFF9..=0xFFFB
                | 0x110BD
                | 0x110CD
                | 0x13430..=0x1343F
                | 0x1BCA0..=0x1BCA3
                | 0x1D173..=0x1D17A
                | 0xE0001
                | 0xE0020..=0xE007F
        )
}

/// This host's name, as the operating system gives it; `localhost` when
/// it gives none.
fn host_name() -> String {
    #[cfg(unix)]
    let name = rustix::system::uname().nodename().to_string_lossy().into_owned();
    #[cfg(not(unix))]
    let name = std::env::var("COMPUTERNAME").unwrap_or_default();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_label_is_encoded_to_characters_no_store_reads() {
        let label = HolderLabel::new("web-3:4182 ü").unwrap();
        assert_eq!(label.encoded(), "web-3%3A4182%20%C3%BC");
        assert!(label.encoded().bytes().all(|b| plain(b) || b == b'%'));
        assert_eq!(decode(label.encoded()).as_deref(), Some("web-3:4182 ü"));
        for hostile in ["a'b", "a,b", "a;b", "a\\b", "a:b", "{a}", "a.b%", "x'); DROP TABLE t; --"] {
            let encoded = HolderLabel::new(hostile).unwrap().encoded().to_owned();
            assert!(!encoded.contains(['\'', ',', ';', '\\', ':', '{', '}', ' ']), "{encoded}");
            assert_eq!(decode(&encoded).as_deref(), Some(hostile));
        }
    }

    #[test]
    fn labels_are_bounded_and_printable() {
        assert!(HolderLabel::new("").is_err());
        assert!(HolderLabel::new("a\nb").is_err());
        assert!(HolderLabel::new("web-1\u{202E}4321").is_err(), "a right-to-left override");
        assert!(HolderLabel::new("web\u{200B}1").is_err(), "a zero-width space");
        assert!(HolderLabel::new(&"a".repeat(MAX_HOLDER_BYTES)).is_ok());
        assert!(HolderLabel::new(&"a".repeat(MAX_HOLDER_BYTES + 1)).is_err());
        // Each ':' takes three bytes.
        assert!(HolderLabel::new(&":".repeat(14)).is_err());
        assert!(HolderLabel::new(&":".repeat(13)).is_ok());
    }

    #[test]
    fn the_default_is_this_host_and_pid_and_always_fits() {
        let label = HolderLabel::of_this_process();
        assert!(label.as_str().ends_with(&format!(":{}", std::process::id())), "{label}");
        assert!(label.as_str().len() > format!(":{}", std::process::id()).len(), "{label}");
        assert!(label.encoded().len() <= MAX_HOLDER_BYTES);
    }

    #[test]
    fn what_is_not_an_encoded_label_decodes_to_none() {
        assert_eq!(decode("a%2"), None);
        assert_eq!(decode("a%zz"), None);
        assert_eq!(decode("a b"), None);
        assert_eq!(decode("%FF"), None);
        assert_eq!(decode("a%1B%5B2J"), None, "a terminal's escape is no label");
        assert_eq!(decode("web-1%E2%80%AE4321"), None, "nor a right-to-left override");
        assert_eq!(decode(&"a".repeat(MAX_HOLDER_BYTES + 1)), None, "nor more than a label may be");
        assert_eq!(decode("").as_deref(), Some(""));
    }
}
