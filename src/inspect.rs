//! `Backend::inspect`: what a backend's store holds of one key, read at
//! once. An operator's first question about a lock that misbehaves is "who
//! holds it, and who waits?"; this answers it from the store itself, so it
//! sees every process's holders, not only this one's. A read: it takes,
//! extends and changes nothing.

use std::time::Duration;

use crate::acquire::LockMode;

/// At most this many holders are listed (a reader set may be large); all
/// are counted.
pub const SHOWN_HOLDERS: usize = 64;

/// One key as its store held it when read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inspection {
    /// The backend whose store answered (a policy's member, for a policy).
    pub backend: String,
    /// How the key is held: `None` when nobody holds it.
    pub mode: Option<LockMode>,
    /// The key's limit: above 1 for a counted key, else 1.
    pub limit: u32,
    /// Live holders: shared or counted keys may have several.
    pub held: u32,
    /// The first [`SHOWN_HOLDERS`] of them: soonest expiry first (the store
    /// drivers) or oldest grant first (local).
    pub holders: Vec<Holding>,
    /// Acquires waiting for the key that the store knows of: their marks on
    /// a store driver (one per waiting process and acquire; a process's
    /// other acquires queue behind its own head), every queued acquire on
    /// the local driver.
    pub waiting: u32,
    /// No fence granted on this key so far is larger; the next grant's is.
    /// `None` where nothing of the key was kept (a key never granted, or
    /// one whose fence counter expired with `fenceRetentionMs`), and on
    /// the local driver (its fences are the backend's, not the key's).
    pub fence: Option<u64>,
}

/// One live holder of an inspected key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The units it holds: 1 unless the key is counted.
    pub units: u32,
    /// Until its lease expires unless renewed; `None` on the local
    /// driver, whose leases do not expire.
    pub remaining: Option<Duration>,
    /// Its fence, where the store keeps each holder's (local).
    pub fence: Option<u64>,
}

impl Inspection {
    /// True while someone holds the key.
    pub fn is_held(&self) -> bool {
        self.held > 0
    }
}
