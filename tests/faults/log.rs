//! The hold log every worker appends to, one line per event, times in
//! microseconds of `CLOCK_MONOTONIC` (one clock for every process of the
//! machine, so holds of different processes compare directly):
//!
//! - `A <key> <fence> <start>`: the lease was granted (the section starts).
//! - `E <key> <fence> <start> <end> <store> <release>`: the section ended at
//!   `end`, just before the release. `store` is `W` (write accepted), `X`
//!   (write refused as stale) or `R` (read refused as stale); `release` is
//!   `OK`, `FALSE` or the error code the release failed with.
//! - `F <code>`: an acquire failed with `code`.

use std::collections::BTreeMap;

/// Now on `CLOCK_MONOTONIC`, in microseconds.
pub fn mono_us() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `now` is a valid timespec to write to.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) }, 0);
    now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000
}

/// One critical section.
#[derive(Debug, Clone)]
pub struct Hold {
    pub worker: String,
    pub key: String,
    pub fence: u128,
    pub start: u64,
    pub end: u64,
    /// `W`, `X`, `R`, or `?` when the worker was killed inside the section.
    pub store: char,
    /// `OK`, `FALSE`, an error code, or `KILLED`.
    pub release: String,
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
    /// A section granted but not ended (only a killed worker leaves one).
    pub open: Option<Hold>,
}

pub fn parse(worker: &str, text: &str) -> WorkerLog {
    let mut log = WorkerLog::default();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        match fields.as_slice() {
            ["A", key, fence, start] => {
                let start = start.parse().unwrap();
                log.open = Some(Hold {
                    worker: worker.into(),
                    key: key.to_string(),
                    fence: fence.parse().unwrap(),
                    start,
                    end: u64::MAX,
                    store: '?',
                    release: "KILLED".into(),
                });
            }
            ["E", key, fence, start, end, store, release] => {
                log.open = None;
                log.holds.push(Hold {
                    worker: worker.into(),
                    key: key.to_string(),
                    fence: fence.parse().unwrap(),
                    start: start.parse().unwrap(),
                    end: end.parse().unwrap(),
                    store: store.chars().next().unwrap(),
                    release: release.to_string(),
                });
            }
            ["F", code] => *log.failures.entry(code.to_string()).or_default() += 1,
            // A line cut short by SIGKILL.
            _ => {}
        }
    }
    log
}

/// True when the last complete line says the worker holds a lease now.
pub fn holding(text: &str) -> bool {
    text.lines().last().is_some_and(|line| line.starts_with("A "))
}
