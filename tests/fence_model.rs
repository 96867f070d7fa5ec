//! The Redis driver's fence reservations, checked exhaustively on a model
//! (a breadth-first search over every state within small bounds): fences
//! of a key never repeat and never go backwards, whatever order grants,
//! second boundaries, copies of the counter, restarts, promotions (onto a
//! clock behind) and the counter's expiry come in.
//!
//! The model is the scripts' rule (`next_fence!` and `reserve` in
//! `src/redis/scripts.rs`) on one key:
//! - a grant's fence is `max(counter + 1, clock)`; the counter is written on
//!   the primary alone, and a *reservation* (the end of the fence's second)
//!   is replicated and appended to the AOF when the rule asks for one;
//! - what a restart or a promotion brings back (`persisted`) is the last
//!   replicated write, or an exact copy of the primary's counter (an RDB
//!   snapshot, an AOF rewrite, a full resync, `MIGRATE`) when no replicated
//!   write came after the copy;
//! - a counter that expires on the primary is deleted on its replicas and
//!   in its AOF too (Redis replicates the `DEL`);
//! - a grant takes at least one tick of the clock (a script runs for more
//!   than a microsecond);
//! - a restart or a promotion takes at least one tick, and the server
//!   that comes back may have a clock behind by up to `behind` ticks (less
//!   than the retention: docs/guarantees.md's bound) when it holds a replicated
//!   write (a replica or an AOF that had the key's last reservation). Onto
//!   an exact copy with no replicated write after it, a clock behind is the
//!   stated window of docs/guarantees.md (a replica that resynchronised), not checked.
//!
//! - a grant whose fence would be more than `LEAD` ticks above the clock,
//!   and no more than a second and `LEAD`, is not made (the scripts'
//!   `LEAD_US`): the next try comes at a later tick. `LEAD` is one tick:
//!   less than a grant and a restore take together, as 100 us is less
//!   than any restart or failover.
//!
//! A restore brings back everything persisted (an AOF synced on every write,
//! a replica that acknowledged), or, with `lossy` bounds, what was persisted
//! at the last *sync* (a step of its own, at any time; every restore is one):
//! the writes after it are a lost tail (an AOF's unsynced writes, a replica
//! that lagged). Restores that lose a tail are checked with the clocks in
//! agreement (the clock assumption of docs/guarantees.md: to within the
//! time a restore takes, here less than a tick); onto a clock behind, a lost
//! tail can repeat a fence whatever the rule (a test below shows it: the
//! documented limit).
//!
//! The rules the scripts had before (a reservation only when a fence enters
//! a later second than the counter before it; fences above the clock
//! granted at once) and the counter's TTL from now (`SET ... PX retention`)
//! are kept as variants: the search must find a repeated fence with each
//! (issue 49, Redis findings 1 and 2; the review of 2026-12-05), which is
//! what shows that it can fail.

use std::collections::{HashMap, VecDeque};

/// When a grant writes a reservation, and when it is made.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rule {
    /// Before: a reservation when the fence's second is later than the
    /// counter's.
    SecondOfTheCounter,
    /// Before the review of 2026-12-05: a reservation when the fence is not
    /// below the reservation the counter implies (the end of its second; a
    /// counter that is a whole second, as a restored reservation is, implies
    /// itself), or when the counter is at or ahead of the clock (its fence
    /// is `counter + 1`, above anything the clock covers).
    NotBelowTheReservation,
    /// Now: those reservations, and no grant of a fence more than `LEAD`
    /// above the clock and no more than a second and `LEAD` (the grant
    /// waits for the clock).
    WaitsForTheClock,
}

/// How far above the clock a fence may be granted (`LEAD_US`), in ticks.
const LEAD: u64 = 1;

/// When a counter written by a grant expires.
#[derive(Clone, Copy, Debug)]
enum Ttl {
    /// Before: `retention` from now (`SET ... PX`).
    FromNow,
    /// Now: `retention` after its value (`SET ... PXAT value + retention`).
    FromValue,
}

#[derive(Clone, Copy, Debug)]
struct Bounds {
    /// Ticks of the clock in a second of the fences' clock.
    second: u64,
    /// `fenceRetentionMs`, in ticks.
    retention: u64,
    /// How far behind a promoted server's clock may be.
    behind: u64,
    /// The last tick explored.
    horizon: u64,
    /// Restarts or promotions, and copies, per history.
    restores: u8,
    copies: u8,
    /// A restore may lose the writes since the last sync.
    lossy: bool,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
struct Counter {
    value: u64,
    lapses: u64,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct State {
    /// The true time, and how far the primary's clock is behind it: its
    /// clock reads `time - behind`.
    time: u64,
    behind: u64,
    /// The primary's counter.
    memory: Option<Counter>,
    /// What a restart or a promotion brings back.
    persisted: Option<Counter>,
    /// `persisted` is an exact copy of the primary's counter, with no
    /// replicated write after it.
    copied: bool,
    /// `persisted` and `copied` at the last sync (with `lossy` bounds only):
    /// what a restore that loses its tail brings back.
    synced: Option<Counter>,
    synced_copied: bool,
    /// The highest fence granted so far.
    highest: u64,
    restores: u8,
    copies: u8,
}

#[derive(Clone, Debug)]
enum Step {
    Grant(u64),
    Tick,
    Expire,
    Copy,
    Sync,
    Restore { behind: u64, lost_tail: bool },
}

impl State {
    fn clock(&self) -> u64 {
        self.time - self.behind
    }
}

fn live(counter: Option<Counter>, clock: u64) -> Option<Counter> {
    counter.filter(|c| c.lapses > clock)
}

/// Every state one step from `s`, or the fence that repeated.
fn next(s: &State, rule: Rule, ttl: Ttl, b: &Bounds) -> Result<Vec<(Step, State)>, (Step, u64)> {
    let mut out = Vec::new();
    let clock = s.clock();
    if s.time < b.horizon {
        let counter = live(s.memory, clock).map_or(0, |c| c.value);
        let fence = (counter + 1).max(clock);
        let lead = fence - clock;
        let waits = rule == Rule::WaitsForTheClock && lead > LEAD && lead <= b.second + LEAD;
        if !waits && fence <= s.highest {
            return Err((Step::Grant(fence), s.highest));
        }
        let reserve = match rule {
            Rule::SecondOfTheCounter => fence / b.second > counter / b.second,
            Rule::NotBelowTheReservation | Rule::WaitsForTheClock => counter >= clock || fence >= counter.div_ceil(b.second) * b.second,
        };
        let lapses = match ttl {
            Ttl::FromNow => clock + b.retention,
            Ttl::FromValue => fence + b.retention,
        };
        let mut t = s.clone();
        if reserve {
            let bound = (fence / b.second + 1) * b.second;
            t.persisted = Some(Counter { value: bound, lapses: bound + b.retention });
            t.copied = false;
        }
        t.memory = Some(Counter { value: fence, lapses });
        t.highest = fence;
        t.time += 1;
        if !waits {
            out.push((Step::Grant(fence), t));
        }
        let mut t = s.clone();
        t.time += 1;
        out.push((Step::Tick, t));
    }
    if s.memory.is_some() && live(s.memory, clock).is_none() {
        out.push((Step::Expire, State { memory: None, persisted: None, copied: false, ..s.clone() }));
    }
    if s.copies > 0 {
        let copy = live(s.memory, clock);
        out.push((Step::Copy, State { persisted: copy, copied: true, copies: s.copies - 1, ..s.clone() }));
    }
    if b.lossy && (s.synced, s.synced_copied) != (s.persisted, s.copied) {
        out.push((Step::Sync, State { synced: s.persisted, synced_copied: s.copied, ..s.clone() }));
    }
    if s.restores > 0 {
        let mut sources = vec![(false, s.persisted, s.copied)];
        if b.lossy {
            sources.push((true, s.synced, s.synced_copied));
        }
        for (lost_tail, persisted, copied) in sources {
            // Onto an exact copy, the clock stays as it was (see the module's
            // note); onto a replicated write, any clock up to `behind` behind.
            let offsets = if copied { s.behind..=s.behind } else { 0..=b.behind };
            for behind in offsets {
                let restored = State { time: s.time + 1, behind, ..s.clone() };
                let memory = live(persisted, restored.clock());
                let synced = if b.lossy { memory } else { None };
                out.push((
                    Step::Restore { behind, lost_tail },
                    State { memory, persisted: memory, copied, synced, synced_copied: copied, restores: s.restores - 1, ..restored },
                ));
            }
        }
    }
    Ok(out)
}

/// The shortest history that repeats a fence (or sends one backwards),
/// if any within the bounds, and how many states the search visited.
fn counterexample(rule: Rule, ttl: Ttl, b: &Bounds) -> (Option<Vec<Step>>, usize) {
    let start = State {
        time: b.second + 1 + b.behind,
        behind: 0,
        memory: None,
        persisted: None,
        copied: false,
        synced: None,
        synced_copied: false,
        highest: 0,
        restores: b.restores,
        copies: b.copies,
    };
    let mut parent: HashMap<State, Option<(State, Step)>> = HashMap::from([(start.clone(), None)]);
    let mut queue = VecDeque::from([start]);
    let history = |parent: &HashMap<State, Option<(State, Step)>>, mut at: State, last: Step| {
        let mut steps = vec![last];
        while let Some(Some((before, step))) = parent.get(&at) {
            steps.push(step.clone());
            at = before.clone();
        }
        steps.reverse();
        steps
    };
    while let Some(s) = queue.pop_front() {
        match next(&s, rule, ttl, b) {
            Err((step, _)) => return (Some(history(&parent, s, step)), parent.len()),
            Ok(steps) => {
                for (step, t) in steps {
                    if !parent.contains_key(&t) {
                        parent.insert(t.clone(), Some((s.clone(), step)));
                        queue.push_back(t);
                    }
                }
            }
        }
    }
    (None, parent.len())
}

/// The fences a history granted, in order.
fn fences(steps: &[Step]) -> Vec<u64> {
    steps.iter().filter_map(|step| if let Step::Grant(fence) = step { Some(*fence) } else { None }).collect()
}

/// The last grant of `steps` is not above every grant before it.
fn repeats(steps: &[Step]) -> bool {
    let granted = fences(steps);
    granted.split_last().is_some_and(|(last, before)| before.iter().any(|fence| fence >= last))
}

const BOUNDS: [Bounds; 3] = [
    // A retention longer than a second (the default's case).
    Bounds { second: 3, retention: 5, behind: 2, horizon: 20, restores: 4, copies: 3, lossy: false },
    // A retention shorter than a second (a small fenceRetentionMs).
    Bounds { second: 4, retention: 2, behind: 1, horizon: 20, restores: 4, copies: 3, lossy: false },
    Bounds { second: 2, retention: 3, behind: 2, horizon: 18, restores: 4, copies: 3, lossy: false },
];

/// The bounds with restores that lose their tail, the clocks in agreement.
fn lossy_bounds() -> impl Iterator<Item = Bounds> {
    BOUNDS.iter().map(|b| Bounds { behind: 0, lossy: true, ..*b })
}

fn restores(steps: &[Step]) -> Vec<(u64, bool)> {
    steps
        .iter()
        .filter_map(|step| if let Step::Restore { behind, lost_tail } = step { Some((*behind, *lost_tail)) } else { None })
        .collect()
}

#[test]
fn the_reservation_rule_never_repeats_a_fence_within_the_bounds() {
    for b in &BOUNDS {
        let (found, visited) = counterexample(Rule::WaitsForTheClock, Ttl::FromValue, b);
        assert!(found.is_none(), "{b:?}: a fence repeats after {found:?}");
        eprintln!("{b:?}: {visited} states, no fence repeats");
    }
}

#[test]
fn waiting_for_the_clock_never_repeats_a_fence_when_restores_lose_their_tail() {
    for b in lossy_bounds() {
        let (found, visited) = counterexample(Rule::WaitsForTheClock, Ttl::FromValue, &b);
        assert!(found.is_none(), "{b:?}: a fence repeats after {found:?}");
        eprintln!("{b:?}: {visited} states, no fence repeats");
    }
}

#[test]
fn the_rule_before_repeats_a_fence_when_a_restore_within_a_second_loses_its_tail() {
    // The review of 2026-12-05 (tests/redis_fence_review.rs): a restore
    // brings back a reservation ahead of the clock, a fence is granted
    // above it, and a second restore that lost that grant's reservation
    // brings the counter back below it while the clock has not passed it.
    for b in lossy_bounds() {
        let (found, _) = counterexample(Rule::NotBelowTheReservation, Ttl::FromValue, &b);
        let steps = found.unwrap_or_else(|| panic!("{b:?}: no counterexample for the rule before"));
        assert!(repeats(&steps), "{steps:?}");
        assert!(restores(&steps).iter().any(|&(_, lost_tail)| lost_tail), "{b:?}: a restore lost its tail: {steps:?}");
        eprintln!("{b:?}: {steps:?}");
    }
}

#[test]
fn a_lost_tail_onto_a_clock_behind_can_still_repeat_a_fence() {
    // The clock assumption's limit (docs/guarantees.md): a restore that
    // loses its tail onto a server whose clock is behind by more than the
    // restore took (one tick here) brings back a counter below fences the
    // clock has not reached again: waiting for the clock cannot help.
    let b = Bounds { behind: 1, lossy: true, ..BOUNDS[0] };
    let (found, _) = counterexample(Rule::WaitsForTheClock, Ttl::FromValue, &b);
    let steps = found.expect("a counterexample with a lost tail onto a clock behind");
    assert!(repeats(&steps), "{steps:?}");
    assert!(restores(&steps).iter().any(|&(behind, lost_tail)| behind > 0 && lost_tail), "{b:?}: {steps:?}");
    eprintln!("{b:?}: {steps:?}");
}

#[test]
fn the_rule_before_repeats_a_fence_after_two_restores_within_a_second() {
    // Issue 49, Redis finding 1: the search must find it with the old rule
    // put back, with no clock behind (two reloads of a synced AOF).
    for b in BOUNDS.iter().map(|b| Bounds { behind: 0, ..*b }) {
        let (found, _) = counterexample(Rule::SecondOfTheCounter, Ttl::FromValue, &b);
        let steps = found.unwrap_or_else(|| panic!("{b:?}: no counterexample for the rule before"));
        assert!(repeats(&steps), "{steps:?}");
        let restores = restores(&steps);
        assert!(restores.len() >= 2 && restores.iter().all(|&(behind, _)| behind == 0), "{b:?}: restores, no clock behind: {steps:?}");
        eprintln!("{b:?}: {steps:?}");
    }
}

#[test]
fn a_ttl_from_now_lets_a_counter_ahead_of_the_clock_expire_below_it() {
    // Issue 49, Redis finding 2: with a retention shorter than a second, a
    // counter raised above the clock by a restored reservation expires
    // while the clock is still below it, and the next fence comes from the
    // clock.
    let b = &BOUNDS[1];
    let (found, _) = counterexample(Rule::NotBelowTheReservation, Ttl::FromNow, b);
    let steps = found.expect("a counterexample with the TTL from now");
    assert!(repeats(&steps), "{steps:?}");
    eprintln!("{b:?}: {steps:?}");
}
