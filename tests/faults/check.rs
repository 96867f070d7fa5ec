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
//! - Under a policy backend (see [`check_policy`]), fences compare only
//!   between sections one member granted, so the rules above hold per key
//!   and member. A key of a fail-closed rule is served by its one member
//!   only and overlaps nothing. A key of a fallback rule is served by the
//!   other member only while the preferred one could not serve (the
//!   outage's window), and may then have a holder on each member: those
//!   overlaps are the fallback's known hazard (the store's fence refuses
//!   the stale one, which nobody told), counted and excused only inside
//!   that window.

use std::collections::BTreeMap;

use crate::log::{Hold, HoldKind, PLACED};
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
    /// Under a policy backend, each rule's figures.
    pub rules: Vec<RuleFindings>,
    pub violations: Vec<String>,
}

/// A rule of a policy scenario, as the checks see it.
pub struct Rule {
    /// As the policy's status names it (`rules[0]`, `default`).
    pub label: &'static str,
    /// The keys it takes, those that start with it (the default's is empty:
    /// the rules are tried in order, the default last).
    pub prefix: &'static str,
    /// `onUnavailable: fallBack` (else `failClosed`, on the preferred member only).
    pub fall_back: bool,
}

/// What the checks of a policy scenario know of it.
pub struct Policy<'a> {
    pub rules: &'a [Rule],
    /// The member every rule prefers (the one the fault takes away).
    pub preferred: &'a str,
    /// When (µs, `CLOCK_MONOTONIC`) the preferred member was killed, and
    /// when it answered again; `None`: no outage happened.
    pub outage: Option<(u64, u64)>,
    /// How long after it answered again a process may still pass it over,
    /// and the fallback's sections granted then last.
    pub after_back: u64,
}

impl Policy<'_> {
    pub fn rule(&self, key: &str) -> &Rule {
        self.rules.iter().find(|rule| key.starts_with(rule.prefix)).expect("the default rule takes every key")
    }

    /// True at the instants a fallback may serve: the outage's window.
    fn inside(&self, at: u64) -> bool {
        self.outage.is_some_and(|(down, back)| (down..=back + self.after_back).contains(&at))
    }
}

/// One rule's figures in a policy scenario.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RuleFindings {
    pub label: &'static str,
    pub fall_back: bool,
    /// Sections by the member that served them.
    pub grants: BTreeMap<String, u64>,
    /// Sections served by a member other than the preferred one.
    pub fallbacks: u64,
    /// Acquires refused `NO_ELIGIBLE_BACKEND`, and of those, the ones
    /// refused because their process was acquiring the key on the
    /// preferred member when it proved unreachable ([`PLACED`]: allowed
    /// inside the outage, for a fallback rule too).
    pub refusals: u64,
    pub placed_refusals: u64,
    /// Pairs of its sections that overlapped in time, and of those, the
    /// pairs with a holder on each member inside the window (allowed for a
    /// fallback rule only).
    pub overlaps: u64,
    pub cross_overlaps: u64,
    /// Sections the store refused for a higher fence of the other member
    /// (fences compare only per member), inside the window: excused.
    pub cross_refused: u64,
}

/// A policy scenario's checks: [`check`]'s per key and member (every section
/// exclusive), with the stale holders of a fallback's overlaps excused, and
/// the rules' own (see the module's doc). `failed` is the failed acquires:
/// key, code and time.
pub fn check_policy(
    holds: &[Hold],
    failed: &[(String, String, u64)],
    stores: &BTreeMap<String, KeyHistory>,
    lease_us: u64,
    policy: &Policy,
) -> Findings {
    let mut violations = Vec::new();
    let mut rules: Vec<RuleFindings> =
        policy.rules.iter().map(|rule| RuleFindings { label: rule.label, fall_back: rule.fall_back, ..RuleFindings::default() }).collect();
    let index = |key: &str| policy.rules.iter().position(|rule| std::ptr::eq(rule, policy.rule(key))).unwrap();
    let inside = |at: u64| policy.inside(at);
    for (key, code, at) in failed.iter().filter(|(_, code, _)| code == "NO_ELIGIBLE_BACKEND" || code == PLACED) {
        let found = &mut rules[index(key)];
        found.refusals += 1;
        let placed = code == PLACED;
        found.placed_refusals += u64::from(placed);
        if !inside(*at) {
            violations.push(format!("{key}: refused {code} at {at}, outside the outage"));
        } else if policy.rule(key).fall_back && !placed {
            // Its fallback member (PostgreSQL) stayed up: only a key its
            // process was still trying on Redis may not go there
            // (docs/policy.md, "Nor do this process's other acquires").
            violations.push(format!("{key}: an acquire of a fallback rule refused NO_ELIGIBLE_BACKEND at {at}"));
        }
    }
    let mut excused = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        let rule = policy.rule(&a.key);
        let found = &mut rules[index(&a.key)];
        *found.grants.entry(a.member.clone()).or_default() += 1;
        if a.member != policy.preferred {
            found.fallbacks += 1;
            if !rule.fall_back {
                violations.push(format!("{}: fence {} of a fail-closed rule served by {}", a.key, a.fence, a.member));
            } else if !inside(a.start) {
                violations.push(format!("{}: fence {} served by {} outside the outage", a.key, a.fence, a.member));
            }
        }
        for b in holds.iter().skip(i + 1).filter(|b| b.key == a.key) {
            let from = a.start.max(b.start);
            if from >= a.end.min(b.end) {
                continue;
            }
            found.overlaps += 1;
            let cross = a.member != b.member;
            if !rule.fall_back {
                violations.push(format!(
                    "{}: fail-closed sections of fences {} ({}) and {} ({}) overlapped",
                    a.key, a.fence, a.member, b.fence, b.member
                ));
            } else if cross && inside(from) {
                found.cross_overlaps += 1;
                excused.extend([(a.worker.clone(), a.fence), (b.worker.clone(), b.fence)]);
            } else if cross {
                violations.push(format!(
                    "{}: sections of fences {} ({}) and {} ({}) overlapped outside the outage",
                    a.key, a.fence, a.member, b.fence, b.member
                ));
            }
        }
        // A fence compares only with its member's (docs/policy.md), but the
        // store compares every fence of its key: it refuses a section whose
        // fence is below one the other member granted earlier, overlap or
        // not. Inside the window that is the fallback's hazard too.
        let crossed = |b: &Hold| b.key == a.key && b.member != a.member && b.fence > a.fence && b.start < a.end && inside(b.start);
        if rule.fall_back && matches!(a.store, 'X' | 'R') && inside(a.start) && holds.iter().any(crossed) {
            found.cross_refused += 1;
            excused.push((a.worker.clone(), a.fence));
        }
    }
    if rules.iter().all(|rule| rule.fallbacks == 0 && rule.refusals == 0) {
        violations.push("no acquire fell back and none was refused NO_ELIGIBLE_BACKEND: the policy was not exercised".into());
    }
    // After the outage, the fallback keys go back to the preferred member.
    if let Some((_, back)) = policy.outage {
        let returned = holds.iter().any(|hold| policy.rule(&hold.key).fall_back && hold.member == policy.preferred && hold.start > back);
        if !returned {
            violations.push(format!("no fallback key was served by {} again after the outage", policy.preferred));
        }
    }
    let mut findings = check_excusing(holds, stores, true, lease_us, &|hold| excused.contains(&(hold.worker.clone(), hold.fence)));
    findings.rules = rules;
    findings.violations.extend(violations);
    findings
}

/// `exclusive`: no fault of the scenario outlasts a lease, so no two
/// sections on a key may conflict, unless the older one itself lasted a lease
/// (`lease_us`): the machine paused it (a loaded CI host can), which is a
/// fault past the lease, and its holder must have been told like any other.
pub fn check(holds: &[Hold], stores: &BTreeMap<String, KeyHistory>, exclusive: bool, lease_us: u64) -> Findings {
    check_excusing(holds, stores, exclusive, lease_us, &|_| false)
}

/// [`check`], per key and member (a fence compares only with its member's),
/// where a stale holder `excused` need not have been told.
fn check_excusing(
    holds: &[Hold],
    stores: &BTreeMap<String, KeyHistory>,
    exclusive: bool,
    lease_us: u64,
    excused: &dyn Fn(&Hold) -> bool,
) -> Findings {
    let mut findings = Findings { holds: holds.len() as u64, ..Findings::default() };
    findings.lost = holds.iter().filter(|h| h.told() && h.release != "KILLED").count() as u64;
    findings.readers = holds.iter().filter(|h| h.kind == HoldKind::Reader).count() as u64;
    findings.counted = holds.iter().filter(|h| matches!(h.kind, HoldKind::Counted { .. })).count() as u64;
    let mut by_key: BTreeMap<(&str, &str), Vec<&Hold>> = BTreeMap::new();
    for hold in holds {
        by_key.entry((&hold.key, &hold.member)).or_default().push(hold);
    }
    for ((key, _), mut holds) in by_key {
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
                } else if !excused(hold) {
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

/// The policy checks must be able to fail: hand-made histories (run by the
/// suite's self-test). Redis was killed at 100 and back at 200; a fallback
/// may serve until 250.
pub fn self_test_policy() {
    let rules = [Rule { label: "rules[0]", prefix: "pay:", fall_back: false }, Rule { label: "default", prefix: "", fall_back: true }];
    let policy = Policy { rules: &rules, preferred: "redis", outage: Some((100, 200)), after_back: 50 };
    let hold = |key: &str, member: &str, worker: &str, fence: u128, (start, end): (u64, u64), store: char, release: &str| Hold {
        worker: worker.into(),
        key: key.into(),
        fence,
        start,
        end,
        store,
        release: release.into(),
        kind: HoldKind::Writer,
        asked: start,
        member: member.into(),
    };
    let none = BTreeMap::new();
    let refusal = |key: &str, at: u64| (key.to_string(), "NO_ELIGIBLE_BACKEND".to_string(), at);
    let refused = [refusal("pay:1", 120), refusal("pay:1", 150), refusal("pay:2", 240)];
    let check = |holds: &[Hold], refused: &[(String, String, u64)]| check_policy(holds, refused, &none, 1000, &policy);
    // Before the kill on Redis; at the kill, a holder on Redis overlapped by
    // one on PostgreSQL, whose read made the store refuse the first's write,
    // and nobody told it (its release failed with Redis); back on Redis after.
    let fine = [
        hold("k", "redis", "a", 10, (50, 60), 'W', "OK"),
        hold("pay:1", "redis", "b", 11, (55, 70), 'W', "OK"),
        hold("k", "redis", "a", 12, (95, 130), 'X', "PROVIDER_FAILED"),
        hold("k", "postgres", "b", 20, (110, 150), 'W', "OK"),
        hold("k", "redis", "c", 30, (260, 270), 'W', "OK"),
    ];
    let findings = check(&fine, &refused);
    assert!(findings.violations.is_empty(), "a fallback's overlap inside the outage: {:?}", findings.violations);
    let default = &findings.rules[1];
    assert_eq!((default.fallbacks, default.overlaps, default.cross_overlaps), (1, 1, 1));
    assert_eq!((findings.rules[0].refusals, findings.rules[0].overlaps), (3, 0));

    let with = |extra: &[Hold]| [&fine[..], extra].concat();
    // Fail-closed: no overlap, even inside the outage, on one member or two.
    let pay_overlap =
        with(&[hold("pay:1", "redis", "c", 13, (98, 130), 'X', "LEASE_LOST"), hold("pay:1", "redis", "d", 21, (120, 140), 'W', "OK")]);
    assert!(!check(&pay_overlap, &refused).violations.is_empty(), "an overlap on a fail-closed key");
    let pay_moved = with(&[hold("pay:2", "postgres", "c", 22, (120, 140), 'W', "OK")]);
    assert!(!check(&pay_moved, &refused).violations.is_empty(), "a fail-closed key served by the fallback");
    // Fallback: an overlap outside the window, or a fallback without an outage.
    let late = with(&[hold("k", "redis", "c", 40, (300, 330), 'X', "OK"), hold("k", "postgres", "d", 41, (310, 350), 'W', "OK")]);
    assert!(!check(&late, &refused).violations.is_empty(), "a fallback key's overlap outside the outage");
    let no_outage = Policy { outage: None, ..policy };
    assert!(!check_policy(&fine, &refused, &none, 1000, &no_outage).violations.is_empty(), "a fallback without an outage");
    // A policy run that neither fell back nor refused tested nothing.
    assert!(!check(&fine[..2], &[]).violations.is_empty(), "no fallback, no refusal");
    assert!(!check(&fine, &[refusal("k", 120)]).violations.is_empty(), "a fallback key refused while its fallback served");
    assert!(!check(&fine, &[refusal("pay:1", 300)]).violations.is_empty(), "a fail-closed key refused outside the outage");
    // A fallback key its process was trying on Redis when Redis proved
    // unreachable is refused there (docs/policy.md): counted, inside the
    // outage only.
    let placed = |key: &str, at: u64| (key.to_string(), PLACED.to_string(), at);
    let findings = check(&fine, &[placed("k", 120), placed("pay:1", 130)]);
    assert!(findings.violations.is_empty(), "refusals of keys placed on Redis in the outage: {:?}", findings.violations);
    assert_eq!([1, 1], [0, 1].map(|rule| findings.rules[rule].placed_refusals));
    assert!(!check(&fine, &[placed("k", 20)]).violations.is_empty(), "a placed refusal before the outage");
    assert!(!check(&fine, &[placed("k", 300)]).violations.is_empty(), "a placed refusal after the outage's window");
    // A section on PostgreSQL the store refused for a higher Redis fence,
    // with no overlap, inside the window: excused, counted; outside it, or
    // refused for its own member's fence, its holder should have been told.
    let across = with(&[hold("k", "redis", "e", 28, (200, 210), 'W', "OK"), hold("k", "postgres", "f", 25, (220, 230), 'R', "OK")]);
    let findings = check(&across, &refused);
    assert!(findings.violations.is_empty(), "a refusal across members in the window: {:?}", findings.violations);
    assert_eq!(findings.rules[1].cross_refused, 1);
    let after = with(&[hold("k", "postgres", "f", 40, (220, 230), 'W', "OK"), hold("k", "redis", "g", 35, (280, 290), 'R', "OK")]);
    assert!(!check(&after, &refused).violations.is_empty(), "a refusal across members after the window");
    let own = with(&[hold("k", "redis", "e", 28, (200, 210), 'W', "OK"), hold("k", "redis", "h", 29, (215, 218), 'R', "OK")]);
    assert!(!check(&own, &refused).violations.is_empty(), "a refusal with no higher fence of the other member");
    // Fences compare per member: a lower PostgreSQL fence after a Redis one is no violation...
    let mut per_member = fine.clone();
    per_member[3].fence = 1;
    assert!(check(&per_member, &refused).violations.is_empty(), "fences of two members do not compare");
    // ... but one member's going backwards is.
    per_member[4].fence = 9;
    assert!(!check(&per_member, &refused).violations.is_empty(), "a member's fences going backwards");
}
