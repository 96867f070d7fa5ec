//! The checks of one scenario, over the holds the workers logged and the
//! store's own history. Each finding that breaks a guarantee is a violation.
//!
//! The rules, per key:
//! - Fences: of two sections that did not overlap, one of them a writer,
//!   the later one has the larger fence. (So a writer's fence is above every
//!   earlier section's: one that overlapped it instead is a conflict,
//!   below.) Two readers, or two counted holders, may hold at once, so
//!   their logged sections (which start after the grant) do not show the
//!   order of their grants: of those, one whose acquire was called after
//!   the other's section started (so after its grant) has the larger fence.
//! - A writer's section overlaps no other section (reader or writer) of its
//!   key; readers may overlap each other. Of a conflicting pair the older
//!   fence is the stale one.
//! - A counted key never has more than `limit` units held at once (the sum
//!   of the weights of the sections overlapping at a section's start).
//!   Which holder is stale is not the oldest fence here (an older holder
//!   may still be renewing while a younger one was paused past its lease),
//!   so an instant over the limit is excused only if, without the sections
//!   whose holder was told, the units fit.
//! - Either excuse needs a fault past the lease: in a scenario without one
//!   (`exclusive`), only a section that itself lasted a lease (the machine
//!   paused it) is excused; and a stale holder must always have been told
//!   (`LEASE_LOST` / `OUTCOME_UNKNOWN`).
//! - Every key is taken with one limit (the lock refuses another).

use std::collections::BTreeMap;

use crate::log::{Hold, HoldKind};
use crate::store::{Attempt, KeyHistory};

/// What a scenario's run showed.
#[derive(Default)]
pub struct Findings {
    /// Sections that ended (or were cut short by SIGKILL).
    pub holds: u64,
    /// ... of which readers, and counted sections (the rest are writers).
    pub readers: u64,
    pub counted: u64,
    /// Pairs of sections on one key that overlapped in time and may not:
    /// one of them a writer.
    pub overlaps: u64,
    /// Pairs of readers of one key that overlapped (as they may).
    pub shared_overlaps: u64,
    /// The most units of a counted key held at once, the most but for the
    /// excused stale holders, and its limit.
    pub max_units: Option<(u32, u32, u32)>,
    /// Sections' starts at which a counted key had more than `limit` units held.
    pub over_limit: u64,
    /// Sections that overlapped a later holder or had a store op refused.
    pub stale: u64,
    /// ... of which the holder was told (release LEASE_LOST / OUTCOME_UNKNOWN).
    pub told: u64,
    /// Releases that reported the lease lost (`LEASE_LOST`, `OUTCOME_UNKNOWN`).
    pub lost: u64,
    /// Store writes accepted / refused (refused reads count as refused too).
    pub accepted: u64,
    pub refused: u64,
    /// Readers' reads the store accepted.
    pub reads: u64,
    pub violations: Vec<String>,
}

/// `exclusive`: no fault of the scenario outlasts a lease, so no two
/// sections on a key may conflict, unless the older one itself lasted a lease
/// (`lease_us`): the machine paused it (a loaded CI host can), which is a
/// fault past the lease, and its holder must have been told like any other.
pub fn check(holds: &[Hold], stores: &BTreeMap<String, KeyHistory>, exclusive: bool, lease_us: u64) -> Findings {
    let mut findings = Findings { holds: holds.len() as u64, ..Findings::default() };
    findings.lost = holds.iter().filter(|h| h.told() && h.release != "KILLED").count() as u64;
    findings.readers = holds.iter().filter(|h| h.kind == HoldKind::Reader).count() as u64;
    findings.counted = holds.iter().filter(|h| matches!(h.kind, HoldKind::Counted { .. })).count() as u64;
    let mut by_key: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in holds {
        by_key.entry(&hold.key).or_default().push(hold);
    }
    for (key, mut holds) in by_key {
        holds.sort_by_key(|h| h.start);
        let limits: std::collections::BTreeSet<u32> = holds.iter().map(|h| h.kind.units().0).collect();
        if limits.len() > 1 {
            findings.violations.push(format!("{key}: held with several limits {limits:?}"));
        }
        let paused = |hold: &Hold| hold.end.saturating_sub(hold.start) >= lease_us;
        let mut stale = vec![false; holds.len()];
        for (i, a) in holds.iter().enumerate() {
            stale[i] |= matches!(a.store, 'X' | 'R');
            for (j, b) in holds.iter().enumerate().skip(i + 1) {
                let together =
                    matches!((a.kind, b.kind), (HoldKind::Reader, HoldKind::Reader) | (HoldKind::Counted { .. }, HoldKind::Counted { .. }));
                if together {
                    // Asked after `a` was granted: granted after it.
                    for (first, then) in [(a, b), (b, a)] {
                        if then.asked > first.start && then.fence <= first.fence {
                            findings.violations.push(format!(
                                "{key}: fence {} (worker {}) asked for after fence {} (worker {}) was granted",
                                then.fence, then.worker, first.fence, first.worker
                            ));
                        }
                    }
                }
                if b.start >= a.end {
                    // Entirely after `a`, one of them a writer: its fence must be larger.
                    if !together && b.fence <= a.fence {
                        findings
                            .violations
                            .push(format!("{key}: fence {} (worker {}) after fence {} (worker {})", b.fence, b.worker, a.fence, a.worker));
                    }
                    continue;
                }
                match (a.kind, b.kind) {
                    (HoldKind::Reader, HoldKind::Reader) => {
                        findings.shared_overlaps += 1;
                        continue;
                    }
                    // Counted sections are checked by their units below.
                    (HoldKind::Counted { .. }, HoldKind::Counted { .. }) => continue,
                    _ => {}
                }
                findings.overlaps += 1;
                // The older fence is the stale one.
                let older = if a.fence < b.fence { i } else { j };
                stale[older] = true;
                if exclusive && !paused(holds[older]) {
                    findings
                        .violations
                        .push(format!("{key}: sections of fences {} and {} overlapped without a fault past the lease", a.fence, b.fence));
                }
            }
        }
        check_units(key, &holds, exclusive, &paused, &mut stale, &mut findings);
        for (hold, stale) in holds.iter().zip(stale) {
            if stale {
                findings.stale += 1;
                if hold.told() {
                    findings.told += 1;
                } else {
                    findings.violations.push(format!(
                        "{key}: the stale holder of fence {} (worker {}) was not told (release {})",
                        hold.fence, hold.worker, hold.release
                    ));
                }
            }
        }
    }
    for (key, history) in stores {
        check_store(key, history, &mut findings);
    }
    findings
}

/// A counted key's units: at every section's start, the weights of the
/// sections of `holds` (sorted by start) held then add up to at most the
/// limit, but for those excused (told, and in an `exclusive` scenario paused
/// past the lease too), which are marked stale.
fn check_units(key: &str, holds: &[&Hold], exclusive: bool, paused: &dyn Fn(&Hold) -> bool, stale: &mut [bool], findings: &mut Findings) {
    let counted: Vec<usize> = (0..holds.len()).filter(|&i| matches!(holds[i].kind, HoldKind::Counted { .. })).collect();
    let Some(&first) = counted.first() else { return };
    let limit = holds[first].kind.units().0;
    let mut most = 0;
    let mut most_fresh = 0;
    for &i in &counted {
        let at = holds[i].start;
        let held: Vec<usize> = counted.iter().copied().filter(|&j| holds[j].start <= at && at < holds[j].end).collect();
        let units: u32 = held.iter().map(|&j| holds[j].kind.units().1).sum();
        most = most.max(units);
        if units <= limit {
            most_fresh = most_fresh.max(units);
            continue;
        }
        findings.over_limit += 1;
        let excused: Vec<usize> = held.iter().copied().filter(|&j| holds[j].told() && (!exclusive || paused(holds[j]))).collect();
        let left = units - excused.iter().map(|&j| holds[j].kind.units().1).sum::<u32>();
        for &j in &excused {
            stale[j] = true;
        }
        most_fresh = most_fresh.max(left);
        if left > limit {
            let fences: Vec<String> = held
                .iter()
                .map(|&j| format!("{}x{} ({}, {})", holds[j].fence, holds[j].kind.units().1, holds[j].worker, holds[j].release))
                .collect();
            findings.violations.push(format!(
                "{key}: {units} units of {limit} held at once ({left} by holders not excused): fences {}",
                fences.join(", ")
            ));
        }
    }
    let (so_far, fresh_so_far, _) = findings.max_units.unwrap_or((0, 0, limit));
    findings.max_units = Some((so_far.max(most), fresh_so_far.max(most_fresh), limit));
}

/// The store's own record: accepted fences strictly grow, the counter
/// equals the number of accepted writes (no increment lost), no write was
/// accepted below a reader's read before it, and no reader's read below a
/// write before it.
fn check_store(key: &str, history: &KeyHistory, findings: &mut Findings) {
    let mut last = 0;
    let mut last_read = 0;
    let mut accepted = 0;
    for &attempt in &history.attempts {
        match attempt {
            Attempt::Accepted(fence) => {
                if fence <= last {
                    findings.violations.push(format!("{key}: the store accepted fence {fence} after {last}"));
                }
                if fence <= last_read {
                    findings
                        .violations
                        .push(format!("{key}: the store accepted a write of fence {fence} after a read of fence {last_read}"));
                }
                last = fence;
                accepted += 1;
            }
            Attempt::Refused(_) => {}
            Attempt::Read(fence) => {
                if fence <= last {
                    findings.violations.push(format!("{key}: the store let a reader of fence {fence} read after a write of fence {last}"));
                }
                last_read = last_read.max(fence);
                findings.reads += 1;
            }
        }
    }
    if history.value != accepted {
        findings.violations.push(format!("{key}: counter {} after {accepted} accepted writes", history.value));
    }
    findings.accepted += accepted;
    findings.refused += history.refused;
}
