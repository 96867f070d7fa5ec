//! What the model's clients did and saw, as the checker reads it: every
//! grant, renew, release and close with the instants it was sent and
//! answered (microseconds on the test process's one monotonic clock, which
//! every client shares), and what the store held at the end.

use std::sync::Mutex;
use std::time::Instant;

/// Where a grant is written: the store (one server), the lease namespace
/// and, for postgres, the schema and table. Two backends at one location
/// share their keys; at two locations the same key is two locks.
pub type Location = String;

/// How a lease holds its keys (every key of one lease the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kind {
    pub shared: bool,
    pub limit: u32,
    pub weight: u32,
}

impl Kind {
    pub const EXCLUSIVE: Kind = Kind { shared: false, limit: 1, weight: 1 };
    pub const SHARED: Kind = Kind { shared: true, limit: 1, weight: 1 };

    pub fn counted(limit: u32, weight: u32) -> Kind {
        Kind { shared: false, limit, weight }
    }

    /// True when leases of these two kinds can never hold one key at once.
    pub fn excludes(self, other: Kind) -> bool {
        if self.shared || other.shared {
            return self.shared != other.shared;
        }
        self.weight + other.weight > self.limit.max(other.limit)
    }
}

/// A granted acquire: `sent` when the call began, `recv` when it answered,
/// `valid_until` the end of its validity as the lease reported it then.
#[derive(Clone, Debug)]
pub struct Grant {
    pub lease: usize,
    /// The provider (connection) it was granted on; a close of that
    /// provider ends the lease.
    pub provider: usize,
    pub location: Location,
    /// The backend's name and lease, for the report (`b, leaseMs 3000`).
    pub backend: String,
    pub kind: Kind,
    /// Each key with its fence.
    pub keys: Vec<(String, u64)>,
    pub sent: u64,
    pub recv: u64,
    pub valid_until: u64,
}

/// A renew's answer: `Ok(true)` extends the lease.
#[derive(Clone, Debug)]
pub struct Renew {
    pub lease: usize,
    pub sent: u64,
    pub recv: u64,
    pub renewed: bool,
    /// The lease's validity as it reported it right after the answer
    /// (`recv` or earlier once it says invalid).
    pub valid_until: u64,
}

#[derive(Clone, Debug)]
pub enum Event {
    Grant(Grant),
    Renew(Renew),
    /// A release of the lease began at `sent`: from then on it is not a holder.
    Release {
        lease: usize,
        sent: u64,
    },
    /// A close of the provider began at `sent`: its leases end then.
    Close {
        provider: usize,
        sent: u64,
    },
    /// A store name or row seen by the leftover check.
    Residue(Residue),
    /// A fault the store's fault thread injected, from `at` to `until`
    /// (for the report; no rule reads it).
    Fault {
        at: u64,
        until: u64,
        name: &'static str,
    },
}

/// One name (redis) or row (postgres) the store held at `at`; `ttl_ms`
/// `None` for one that never goes by itself.
#[derive(Clone, Debug)]
pub struct Residue {
    pub at: u64,
    pub name: String,
    pub ttl_ms: Option<i64>,
    /// True when `at` is after every lease was released and closed and
    /// the retention (and every wait mark's life) passed: nothing may
    /// remain then.
    pub after_retention: bool,
}

/// The history of one run, recorded by every client thread.
pub struct Recorder {
    start: Instant,
    events: Mutex<Vec<Event>>,
    next_lease: std::sync::atomic::AtomicUsize,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder { start: Instant::now(), events: Mutex::new(Vec::new()), next_lease: Default::default() }
    }

    /// Now, in microseconds since the run began.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    pub fn lease_id(&self) -> usize {
        self.next_lease.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub fn push(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }

    pub fn events(&self) -> Vec<Event> {
        self.events.lock().unwrap().clone()
    }
}
