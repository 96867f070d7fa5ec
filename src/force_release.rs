//! `Backend::force_release`: an operator's break of a stuck lock. Every
//! holder of the key is removed at once, as if each lease had ended now,
//! and the waiters are told; on a store driver the key's fence counter is
//! raised in the same step, so the fence it answers is above every fence
//! the key ever granted and below every fence it grants next: written to a
//! fenced store (its "highest fence seen"), it shuts out the removed
//! holders' late writes even before anyone takes the key again.
//!
//! A removed holder learns it at its next call to the store (a renewal,
//! automatic or not, finds its lease gone: `LEASE_LOST`, `valid` false, a
//! `withLock` section's signal aborted; a release answers `LEASE_LOST`); a
//! local holder at once (its lease is no longer valid, its release false).

/// What one forced release did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForcedRelease {
    /// The backend whose store it changed (a policy's member that held the
    /// key, for a policy; the first of its members when none did).
    pub backend: String,
    /// The live holders it removed (a shared or counted key may have had
    /// several; 0 when the key was free).
    pub removed: u32,
    /// The key's fence counter as raised: above every fence granted on the
    /// key so far; the next grant's is larger. `None` on the local driver
    /// (its fences are the backend's, and the removed leases' are in the
    /// process already).
    pub fence: Option<u64>,
}
