//! The hold log every worker appends to, one line per event, times in
//! microseconds of `CLOCK_MONOTONIC` (one clock for every process of the
//! machine, so holds of different processes compare directly):
//!
//! - `A <key> <fence> <start> <kind> <asked> <member>`: the lease was granted (the
//!   section starts); the acquire was called at `asked`; `member` is the
//!   policy member that served it (`-` for a lease of any other driver).
//! - `E <key> <fence> <start> <end> <store> <release> <kind> <asked> <member>`: the section
//!   ended at `end`, just before the release. `store` is `W` (write
//!   accepted), `X` (write refused as stale), `R` (read refused as stale),
//!   `S` (a reader's read accepted) or `-` (a counted section, which leaves
//!   the store alone); `release` is `OK`, `FALSE` or the error code the
//!   release failed with.
//! - `Q <end>`: the section ended at `end`; the release is under way (a
//!   worker killed now has left its section, and may have released).
//! - `F <code> <time> <key>`: an acquire of `key` failed with `code` at `time`;
//!   [`PLACED`] for a policy's `NO_ELIGIBLE_BACKEND` whose `details.tried`
//!   says the worker's process was acquiring the key on the member that
//!   could not serve it.
//!
//! `kind` is what the lease was asked for (see [`HoldKind`]): `x` a writer
//! (exclusive, the only kind outside the mixed scenarios), `s` a reader
//! (shared), `c<limit>w<weight>` some units of a counted key.

use std::collections::BTreeMap;

/// The code a worker logs for a policy's `NO_ELIGIBLE_BACKEND` that refused
/// the key because its process had it placed on a member that could not
/// serve (a member tried, `LOCK_BUSY`: "this process holds the key there, or
/// is acquiring it"), the behaviour docs/policy.md names.
pub const PLACED: &str = "NO_ELIGIBLE_BACKEND:placed";

/// Now on `CLOCK_MONOTONIC`, in microseconds.
pub fn mono_us() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec to write to.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) }, 0);
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

/// The kind of hold a section's lease was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldKind {
    /// Exclusive, one unit of one: overlaps no other section of its key.
    Writer,
    /// Shared: overlaps other readers of its key, never a writer.
    Reader,
    /// `weight` of a counted key's `limit` units: the weights of the
    /// sections overlapping at any instant add up to at most `limit`.
    Counted { limit: u32, weight: u32 },
}

impl HoldKind {
    pub fn token(self) -> String {
        match self {
            HoldKind::Writer => "x".into(),
            HoldKind::Reader => "s".into(),
            HoldKind::Counted { limit, weight } => format!("c{limit}w{weight}"),
        }
    }

    fn parse(token: &str) -> HoldKind {
        match token {
            "x" => HoldKind::Writer,
            "s" => HoldKind::Reader,
            counted => {
                let (limit, weight) =
                    counted.strip_prefix('c').and_then(|rest| rest.split_once('w')).expect("a kind: x, s or c<limit>w<weight>");
                HoldKind::Counted { limit: limit.parse().unwrap(), weight: weight.parse().unwrap() }
            }
        }
    }

    /// The units of its key's limit the section holds (1 of 1 but counted).
    pub fn units(self) -> (u32, u32) {
        match self {
            HoldKind::Writer | HoldKind::Reader => (1, 1),
            HoldKind::Counted { limit, weight } => (limit, weight),
        }
    }
}

/// One critical section.
#[derive(Debug, Clone)]
pub struct Hold {
    pub worker: String,
    pub key: String,
    pub fence: u128,
    pub start: u64,
    pub end: u64,
    /// `W`, `X`, `R`, `S`, `-`, or `?` when the worker was killed inside the section.
    pub store: char,
    /// `OK`, `FALSE`, an error code, or `KILLED`.
    pub release: String,
    pub kind: HoldKind,
    /// When the acquire was called: the lease was granted between this and `start`.
    pub asked: u64,
    /// The policy member that served the lease, `-` for another driver's.
    pub member: String,
}

impl Hold {
    /// True when the holder was told its lease may be gone.
    pub fn told(&self) -> bool {
        matches!(self.release.as_str(), "LEASE_LOST" | "OUTCOME_UNKNOWN" | "KILLED")
    }
}

/// What one worker's log says.
#[derive(Default)]
pub struct WorkerLog {
    pub holds: Vec<Hold>,
    /// Failed acquires by code.
    pub failures: BTreeMap<String, u64>,
    /// Each failed acquire: its key, code and time.
    pub failed: Vec<(String, String, u64)>,
    /// A section granted but not released (only a killed worker leaves
    /// one); its `end` is `u64::MAX` unless the section ended (`Q`).
    pub open: Option<Hold>,
    /// Leases whose end was logged with another member than their grant.
    pub moved: Vec<String>,
}

pub fn parse(worker: &str, text: &str) -> WorkerLog {
    let mut log = WorkerLog::default();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["A", key, fence, start, kind, asked, member] => {
                let start = start.parse().unwrap();
                log.open = Some(Hold {
                    worker: worker.into(),
                    key: key.to_string(),
                    fence: fence.parse().unwrap(),
                    start,
                    end: u64::MAX,
                    store: '?',
                    release: "KILLED".into(),
                    kind: HoldKind::parse(kind),
                    asked: asked.parse().unwrap(),
                    member: member.to_string(),
                });
            }
            ["E", key, fence, start, end, store, release, kind, asked, member] => {
                // A lease never moves: it ends on the member that granted it.
                if let Some(open) = log.open.take().filter(|open| open.member != *member) {
                    log.moved.push(format!("{key} fence {fence} granted by {} ended on {member}", open.member));
                }
                log.holds.push(Hold {
                    worker: worker.into(),
                    key: key.to_string(),
                    fence: fence.parse().unwrap(),
                    start: start.parse().unwrap(),
                    end: end.parse().unwrap(),
                    store: store.chars().next().unwrap(),
                    release: release.to_string(),
                    kind: HoldKind::parse(kind),
                    asked: asked.parse().unwrap(),
                    member: member.to_string(),
                });
            }
            ["Q", end] => {
                if let Some(open) = log.open.as_mut() {
                    open.end = end.parse().unwrap();
                }
            }
            ["F", code, at, key] => {
                *log.failures.entry(code.to_string()).or_default() += 1;
                log.failed.push((key.to_string(), code.to_string(), at.parse().unwrap()));
            }
            // A line cut short by SIGKILL.
            _ => {}
        }
    }
    log
}

/// The key and kind of the lease the worker holds now, when the last
/// complete line says it holds one.
pub fn holding(text: &str) -> Option<(&str, HoldKind)> {
    let line = text.lines().last()?;
    match line.split(' ').collect::<Vec<_>>().as_slice() {
        ["A", key, _, _, kind, _, _] => Some((key, HoldKind::parse(kind))),
        _ => None,
    }
}
