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
    /// Who holds it: its acquire's own label, else its provider's `holder`
    /// label (this host's name and pid by default); `None` for a lease an
    /// older release took, whose token carries none.
    pub label: Option<String>,
    /// The units it holds: 1 unless the key is counted.
    pub units: u32,
    /// Until its lease expires unless renewed; `None` on the local
    /// driver, whose leases do not expire.
    pub remaining: Option<Duration>,
    /// The fence its grant got; `None` where the store kept none (a lease
    /// an older release took).
    pub fence: Option<u64>,
    /// How long it has held the key, by the store's clock (the process's
    /// on local): at least this long since its grant. `None` where not
    /// known (see each driver's `inspect`).
    pub held_for: Option<Duration>,
}

impl Inspection {
    /// True while someone holds the key.
    pub fn is_held(&self) -> bool {
        self.held > 0
    }
}

/// What a `WAIT_TIMEOUT` or `LOCK_BUSY` says of the key that kept the
/// acquire out, as its `details`: `{ holders: [{ label, units, remainingMs,
/// fence, heldForMs }], held, waiting }` (fences as decimal strings, `null` where not
/// known), and `keyIndex`, the key's place in the acquire's keys, when it
/// had `several`. `inspections` are the acquire's keys' in its order (up to
/// the first held one), read after the wait ended; the first held one is
/// told (else the first): the key may have been released since, and then
/// says so.
pub(crate) fn busy_details(inspections: &[Inspection], several: bool) -> Option<serde_json::Value> {
    let (index, found) = inspections.iter().enumerate().find(|(_, found)| found.is_held()).or(inspections.first().map(|f| (0, f)))?;
    let holders: Vec<serde_json::Value> = found
        .holders
        .iter()
        .map(|holder| {
            serde_json::json!({
                "label": holder.label,
                "units": holder.units,
                "remainingMs": holder.remaining.map(millis),
                "fence": holder.fence.map(|fence| fence.to_string()),
                "heldForMs": holder.held_for.map(millis),
            })
        })
        .collect();
    let mut details = serde_json::json!({ "holders": holders, "held": found.held, "waiting": found.waiting });
    if several {
        details["keyIndex"] = index.into();
    }
    Some(details)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whether an acquire that ended with `code` tells the key's holders.
pub(crate) fn tells_holders(code: crate::ErrorCode) -> bool {
    matches!(code, crate::ErrorCode::WaitTimeout | crate::ErrorCode::LockBusy)
}
