//! The checks of one scenario, over the holds the workers logged and the
//! store's own history. Each finding that breaks a guarantee is a violation.

use std::collections::BTreeMap;

use crate::log::Hold;
use crate::store::KeyHistory;

/// What a scenario's run showed.
#[derive(Default)]
pub struct Findings {
    /// Sections that ended (or were cut short by SIGKILL).
    pub holds: u64,
    /// Pairs of sections on one key that overlapped in time.
    pub overlaps: u64,
    /// Sections that overlapped a later holder or had a store op refused.
    pub stale: u64,
    /// ... of which the holder was told (release LEASE_LOST / OUTCOME_UNKNOWN).
    pub told: u64,
    /// Releases that reported the lease lost (`LEASE_LOST`, `OUTCOME_UNKNOWN`).
    pub lost: u64,
    /// Store writes accepted / refused.
    pub accepted: u64,
    pub refused: u64,
    pub violations: Vec<String>,
}

/// `exclusive`: no fault of the scenario outlasts a lease, so no two
/// sections on a key may overlap, unless the older one itself lasted a lease
/// (`lease_us`): the machine paused it (a loaded CI host can), which is a
/// fault past the lease, and its holder must have been told like any other.
pub fn check(holds: &[Hold], stores: &BTreeMap<String, KeyHistory>, exclusive: bool, lease_us: u64) -> Findings {
    let mut findings = Findings { holds: holds.len() as u64, ..Findings::default() };
    findings.lost = holds.iter().filter(|h| h.told() && h.release != "KILLED").count() as u64;
    let mut by_key: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for hold in holds {
        by_key.entry(&hold.key).or_default().push(hold);
    }
    for (key, mut holds) in by_key {
        holds.sort_by_key(|h| h.start);
        let mut stale = vec![false; holds.len()];
        for (i, a) in holds.iter().enumerate() {
            stale[i] |= matches!(a.store, 'X' | 'R');
            for (j, b) in holds.iter().enumerate().skip(i + 1) {
                if b.start >= a.end {
                    // Entirely after `a`: its fence must be larger.
                    if b.fence <= a.fence {
                        findings
                            .violations
                            .push(format!("{key}: fence {} (worker {}) after fence {} (worker {})", b.fence, b.worker, a.fence, a.worker));
                    }
                    continue;
                }
                findings.overlaps += 1;
                // The older fence is the stale one.
                let older = if a.fence < b.fence { i } else { j };
                stale[older] = true;
                let paused = holds[older].end.saturating_sub(holds[older].start) >= lease_us;
                if exclusive && !paused {
                    findings
                        .violations
                        .push(format!("{key}: sections of fences {} and {} overlapped without a fault past the lease", a.fence, b.fence));
                }
            }
        }
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

/// The store's own record: accepted fences strictly grow, and the counter
/// equals the number of accepted writes (no increment lost).
fn check_store(key: &str, history: &KeyHistory, findings: &mut Findings) {
    let mut last = 0;
    let mut accepted = 0;
    for &(fence, ok) in &history.attempts {
        if ok {
            if fence <= last {
                findings.violations.push(format!("{key}: the store accepted fence {fence} after {last}"));
            }
            last = fence;
            accepted += 1;
        }
    }
    if history.value != accepted {
        findings.violations.push(format!("{key}: counter {} after {accepted} accepted writes", history.value));
    }
    findings.accepted += accepted;
    findings.refused += history.refused;
}
