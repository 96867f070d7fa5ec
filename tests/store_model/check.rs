//! The checker over a model run's history (see `history.rs`). Its rules,
//! per store location and key:
//!
//! - (a) **no overlap**: at no instant do leases that say valid hold more
//!   than the key allows (one exclusive holder; shared holders only with
//!   each other; at most `limit` units). A lease says valid from its
//!   grant's answer to the validity it reported (extended from each
//!   renew's answer that said true), and no longer once its release or
//!   its provider's close began or a renew left it invalid. Every lease's
//!   own estimate starts before the store wrote its grant and ends before
//!   the store's expiry, so two such intervals overlapping are two holders
//!   at once by the store's clock too (one host, one clock).
//! - (b) **a renew that answered true was not overtaken**: no grant of a
//!   kind that excludes the lease's was sent after the lease's grant was
//!   answered and answered before the renew was sent (the store gave the
//!   key away in between, so the renew must have found it gone).
//! - (c) **fences strictly increase in grant order**: no fence repeats,
//!   and a grant sent after another was answered has the larger fence.
//! - (d) **nothing left behind**: no store name without an expiry, and
//!   none at all once every lease was released and the retention passed.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use super::history::{Event, Kind, Location};

/// One rule broken, with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: char,
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}) {}", self.rule, self.detail)
    }
}

/// One key of one lease: when it says valid, and how it holds the key.
#[derive(Debug, Clone)]
struct Hold {
    lease: usize,
    provider: usize,
    backend: String,
    kind: Kind,
    fence: u64,
    sent: u64,
    recv: u64,
    /// Disjoint or not, each `[start, end)`, already cut at the lease's end.
    valid: Vec<(u64, u64)>,
}

/// Every rule over `events`; empty when the history keeps them all.
pub fn check(events: &[Event]) -> Vec<Violation> {
    let holds = holds(events);
    let mut violations = Vec::new();
    for ((location, key), holds) in &holds {
        overlaps(location, key, holds, &mut violations);
        fences(location, key, holds, &mut violations);
    }
    overtaken_renews(events, &holds, &mut violations);
    leftovers(events, &mut violations);
    violations
}

type Holds = BTreeMap<(Location, String), Vec<Hold>>;

/// Each lease's validity, cut at its end, per location and key.
fn holds(events: &[Event]) -> Holds {
    // When each lease ended: its release, its provider's close, a renew
    // that left it invalid; and the validity each renew added.
    let mut end: HashMap<usize, u64> = HashMap::new();
    let mut added: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    let mut closes: HashMap<usize, Vec<u64>> = HashMap::new();
    let cut = |end: &mut HashMap<usize, u64>, lease: usize, at: u64| {
        let e = end.entry(lease).or_insert(u64::MAX);
        *e = (*e).min(at);
    };
    for event in events {
        match event {
            Event::Release { lease, sent } => cut(&mut end, *lease, *sent),
            Event::Renew(renew) if renew.renewed => added.entry(renew.lease).or_default().push((renew.recv, renew.valid_until)),
            Event::Renew(renew) if renew.valid_until <= renew.recv => cut(&mut end, renew.lease, renew.recv),
            Event::Close { provider, sent } => closes.entry(*provider).or_default().push(*sent),
            _ => {}
        }
    }
    let mut holds = Holds::new();
    for event in events {
        let Event::Grant(grant) = event else { continue };
        let closed = closes.get(&grant.provider).into_iter().flatten().copied().filter(|&at| at >= grant.sent).min();
        let until = end.get(&grant.lease).copied().unwrap_or(u64::MAX).min(closed.unwrap_or(u64::MAX));
        let mut valid = vec![(grant.recv, grant.valid_until)];
        valid.extend(added.get(&grant.lease).into_iter().flatten().copied());
        let valid: Vec<(u64, u64)> = valid.into_iter().map(|(s, e)| (s, e.min(until))).filter(|(s, e)| s < e).collect();
        for (key, fence) in &grant.keys {
            holds.entry((grant.location.clone(), key.clone())).or_default().push(Hold {
                lease: grant.lease,
                provider: grant.provider,
                backend: grant.backend.clone(),
                kind: grant.kind,
                fence: *fence,
                sent: grant.sent,
                recv: grant.recv,
                valid: valid.clone(),
            });
        }
    }
    holds
}

fn describe(hold: &Hold) -> String {
    let kind = match hold.kind {
        Kind { shared: true, .. } => "shared".to_owned(),
        Kind { limit: 1, .. } => "exclusive".to_owned(),
        Kind { limit, weight, .. } => format!("{weight} of {limit}"),
    };
    let valid: Vec<String> = hold.valid.iter().map(|(start, end)| format!("{start}..{end}")).collect();
    format!(
        "lease #{} ({kind}, provider {} backend {}, fence {}, sent {} µs, answered {} µs, valid {} µs)",
        hold.lease,
        hold.provider,
        hold.backend,
        hold.fence,
        hold.sent,
        hold.recv,
        valid.join(", ")
    )
}

/// Rule (a), by a sweep over every validity interval of the key.
fn overlaps(location: &str, key: &str, holds: &[Hold], violations: &mut Vec<Violation>) {
    // (instant, starts?, hold): ends sort before starts at one instant,
    // as intervals are half open.
    let mut points: Vec<(u64, bool, usize)> = Vec::new();
    for (i, hold) in holds.iter().enumerate() {
        for &(start, end) in &hold.valid {
            points.push((start, true, i));
            points.push((end, false, i));
        }
    }
    points.sort();
    // Per hold, how many of its intervals are open now.
    let mut open: BTreeMap<usize, usize> = BTreeMap::new();
    for (at, starts, i) in points {
        if !starts {
            if let Some(n) = open.get_mut(&i) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&i);
                }
            }
            continue;
        }
        if let Some(n) = open.get_mut(&i) {
            *n += 1;
            continue;
        }
        let new = &holds[i];
        let others: Vec<&Hold> = open.keys().map(|&j| &holds[j]).filter(|other| other.lease != new.lease).collect();
        let units: u32 = others.iter().map(|other| other.kind.weight).sum::<u32>() + new.kind.weight;
        let broken = others.iter().any(|other| other.kind.shared != new.kind.shared) || (!new.kind.shared && units > new.kind.limit);
        if broken {
            let others: Vec<String> = others.iter().map(|other| describe(other)).collect();
            violations.push(Violation {
                rule: 'a',
                detail: format!(
                    "key {key:?} at {location}: {} says valid from {at} µs while {} say valid",
                    describe(new),
                    others.join(" and ")
                ),
            });
        }
        open.insert(i, 1);
    }
}

/// Rule (c): fences distinct, and rising with the real-time order of grants.
fn fences(location: &str, key: &str, holds: &[Hold], violations: &mut Vec<Violation>) {
    let mut by_fence: Vec<&Hold> = holds.iter().collect();
    by_fence.sort_by_key(|hold| hold.fence);
    for pair in by_fence.windows(2) {
        if pair[0].fence == pair[1].fence {
            violations.push(Violation {
                rule: 'c',
                detail: format!("key {key:?} at {location}: fence repeated by {} and {}", describe(pair[0]), describe(pair[1])),
            });
        }
    }
    // For each grant, the highest fence of every grant answered before it
    // was sent: its own fence must be above.
    let mut by_recv: Vec<&Hold> = holds.iter().collect();
    by_recv.sort_by_key(|hold| hold.recv);
    let mut best: Vec<usize> = Vec::with_capacity(by_recv.len());
    for (i, hold) in by_recv.iter().enumerate() {
        let prior = best.last().copied();
        best.push(match prior {
            Some(j) if by_recv[j].fence >= hold.fence => j,
            _ => i,
        });
    }
    for hold in holds {
        let before = by_recv.partition_point(|other| other.recv < hold.sent);
        if before == 0 {
            continue;
        }
        let highest = by_recv[best[before - 1]];
        // (An equal fence is the repeat reported above.)
        if highest.fence > hold.fence {
            violations.push(Violation {
                rule: 'c',
                detail: format!(
                    "key {key:?} at {location}: {} was answered before {} was sent, but its fence is not below",
                    describe(highest),
                    describe(hold)
                ),
            });
        }
    }
}

/// Rule (b).
fn overtaken_renews(events: &[Event], holds: &Holds, violations: &mut Vec<Violation>) {
    let mut renews: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    for event in events {
        if let Event::Renew(renew) = event {
            if renew.renewed {
                renews.entry(renew.lease).or_default().push((renew.sent, renew.recv));
            }
        }
    }
    for ((location, key), holds) in holds {
        for hold in holds.iter().filter(|hold| renews.contains_key(&hold.lease)) {
            for &(sent, recv) in &renews[&hold.lease] {
                for other in holds {
                    if other.lease != hold.lease && other.kind.excludes(hold.kind) && other.sent >= hold.recv && other.recv <= sent {
                        violations.push(Violation {
                            rule: 'b',
                            detail: format!(
                                "key {key:?} at {location}: the renew of {} sent at {sent} µs answered true at {recv} µs, but {} was granted after its grant and before the renew",
                                describe(hold),
                                describe(other)
                            ),
                        });
                    }
                }
            }
        }
    }
}

/// Rule (d).
fn leftovers(events: &[Event], violations: &mut Vec<Violation>) {
    for event in events {
        let Event::Residue(residue) = event else { continue };
        if residue.ttl_ms.is_none() {
            violations.push(Violation { rule: 'd', detail: format!("{} at {} µs has no expiry", residue.name, residue.at) });
        } else if residue.after_retention {
            violations.push(Violation {
                rule: 'd',
                detail: format!("{} is left at {} µs, after every lease was released and the retention passed", residue.name, residue.at),
            });
        }
    }
}

#[cfg(test)]
mod self_tests {
    //! Hand-made histories: one that keeps every rule, and for each rule
    //! one that breaks it and must be caught.

    use super::super::history::{Grant, Renew, Residue};
    use super::*;

    fn grant(lease: usize, provider: usize, kind: Kind, keys: &[(&str, u64)], sent: u64, recv: u64, valid_until: u64) -> Event {
        Event::Grant(Grant {
            lease,
            provider,
            location: "ns".to_owned(),
            backend: "a".to_owned(),
            kind,
            keys: keys.iter().map(|(k, f)| (k.to_string(), *f)).collect(),
            sent,
            recv,
            valid_until,
        })
    }

    fn release(lease: usize, sent: u64) -> Event {
        Event::Release { lease, sent }
    }

    fn renew(lease: usize, sent: u64, recv: u64, renewed: bool, valid_until: u64) -> Event {
        Event::Renew(Renew { lease, sent, recv, renewed, valid_until })
    }

    fn rules(events: &[Event]) -> Vec<char> {
        check(events).into_iter().map(|v| v.rule).collect()
    }

    #[test]
    fn a_history_that_keeps_every_rule_passes() {
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            renew(1, 500, 510, true, 1500),
            release(1, 1200),
            // Waited while 1 held, granted after its release.
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 11), ("j", 3)], 100, 1300, 2000),
            // Expired unreleased; the next is granted after its validity.
            grant(3, 3, Kind::EXCLUSIVE, &[("k", 12)], 1400, 2100, 3000),
            renew(2, 2500, 2510, false, 2510),
            Event::Close { provider: 3, sent: 2900 },
            // Readers together; units up to the limit.
            grant(4, 1, Kind::SHARED, &[("r", 1)], 0, 10, 900),
            grant(5, 2, Kind::SHARED, &[("r", 2)], 0, 20, 900),
            grant(6, 1, Kind::counted(3, 2), &[("c", 1)], 0, 10, 900),
            grant(7, 2, Kind::counted(3, 1), &[("c", 2)], 0, 20, 900),
            // The same key at another location is another lock.
            Event::Grant(Grant {
                lease: 8,
                provider: 2,
                location: "other".to_owned(),
                backend: "a".to_owned(),
                kind: Kind::EXCLUSIVE,
                keys: vec![("k".to_owned(), 10)],
                sent: 0,
                recv: 50,
                valid_until: 1000,
            }),
            Event::Residue(Residue { at: 100, name: "fence".to_owned(), ttl_ms: Some(600), after_retention: false }),
        ];
        assert_eq!(check(&events), vec![]);
    }

    #[test]
    fn two_exclusive_holders_at_once_are_an_overlap() {
        let events =
            vec![grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000), grant(2, 2, Kind::EXCLUSIVE, &[("k", 11)], 10, 990, 2000)];
        assert_eq!(rules(&events), vec!['a']);
    }

    #[test]
    fn a_renewed_lease_overlapping_a_later_grant_is_an_overlap() {
        // The renew extends 1 past the grant of 2 (answered at 1100).
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            renew(1, 900, 1200, true, 1900),
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 11)], 1000, 1100, 2000),
        ];
        assert_eq!(rules(&events), vec!['a']);
    }

    #[test]
    fn a_writer_among_readers_and_units_past_the_limit_are_overlaps() {
        let events = vec![
            grant(1, 1, Kind::SHARED, &[("r", 1)], 0, 5, 1000),
            grant(2, 2, Kind::EXCLUSIVE, &[("r", 2)], 0, 50, 1000),
            grant(3, 1, Kind::counted(3, 2), &[("c", 1)], 0, 5, 1000),
            grant(4, 2, Kind::counted(3, 2), &[("c", 2)], 0, 50, 1000),
        ];
        assert_eq!(rules(&events), vec!['a', 'a']);
    }

    #[test]
    fn a_renew_that_answered_true_after_another_grant_was_overtaken() {
        // 1 expired at 1000, 2 was granted at 1100 and still holds when
        // 1's renew says true: an overlap, and an overtaken renew.
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 11)], 900, 1100, 2000),
            renew(1, 1400, 1410, true, 2400),
        ];
        assert_eq!(rules(&events), vec!['a', 'b']);
        // With 2 released before the renew and 1 released at its answer,
        // there is no overlap to see, and the renew is still overtaken.
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 11)], 900, 1100, 2000),
            release(2, 1300),
            renew(1, 1400, 1410, true, 2400),
            release(1, 1410),
        ];
        assert_eq!(rules(&events), vec!['b']);
    }

    #[test]
    fn a_repeated_fence_is_caught() {
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            release(1, 100),
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 10)], 200, 210, 1000),
        ];
        assert_eq!(rules(&events), vec!['c']);
    }

    #[test]
    fn a_fence_below_an_earlier_grant_is_caught() {
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            release(1, 100),
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 9)], 200, 210, 1000),
        ];
        assert_eq!(rules(&events), vec!['c']);
    }

    #[test]
    fn a_name_without_expiry_or_left_after_the_retention_is_caught() {
        let events = vec![
            Event::Residue(Residue { at: 100, name: "lock".to_owned(), ttl_ms: None, after_retention: false }),
            Event::Residue(Residue { at: 9000, name: "fence".to_owned(), ttl_ms: Some(100), after_retention: true }),
        ];
        assert_eq!(rules(&events), vec!['d', 'd']);
    }

    #[test]
    fn a_close_ends_its_providers_leases_only() {
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            Event::Close { provider: 1, sent: 300 },
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 11)], 200, 400, 1000),
        ];
        assert_eq!(rules(&events), Vec::<char>::new());
        let events = vec![
            grant(1, 1, Kind::EXCLUSIVE, &[("k", 10)], 0, 5, 1000),
            Event::Close { provider: 3, sent: 300 },
            grant(2, 2, Kind::EXCLUSIVE, &[("k", 11)], 200, 400, 1000),
        ];
        assert_eq!(rules(&events), vec!['a']);
    }
}
