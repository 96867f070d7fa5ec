//! The answers of the SQL drivers' take and hand-over routines (postgres
//! functions, mysql procedures), one list of integers each: read here once.

use std::sync::Arc;

use super::{Failure, Retry, Taken};

/// One take answer at the start of `reply`, for a request of `keys` keys,
/// and how many numbers it took: `1, fence...` (granted, a fence per key in
/// the order the routine was given them), `0, hint, ticket` (busy) or
/// `-1, i` (another limit). A grant with fewer fences than keys (an answer
/// cut on its way) is a protocol error whose outcome is unknown: the keys
/// may be held, so the caller cleans up rather than trusting it.
pub(crate) fn taken(reply: &[i64], keys: usize) -> Result<(Taken<()>, usize), Failure> {
    Ok(match reply.first() {
        Some(1) => {
            let fences = reply.get(1..=keys).ok_or_else(|| cut(reply.len() - 1, keys))?;
            (Taken::Granted { fences: fences.iter().map(|&fence| fence as u64).collect(), written: vec![()] }, 1 + keys)
        }
        Some(0) => (
            Taken::Busy {
                retry: Retry::from_store(reply.get(1).copied().unwrap_or(-1)),
                ticket: reply.get(2).copied().unwrap_or(0) as u64,
            },
            3,
        ),
        _ => (Taken::OtherLimit, 2),
    })
}

fn cut(fences: usize, keys: usize) -> Failure {
    Failure::Unknown(Arc::new(std::io::Error::other(format!("a grant of {keys} keys answered {fences} fences"))))
}

/// What a hand-off answered: how many released keys were still held, per
/// released key whether a waiter may be granted there, and each tried
/// request's answer.
pub(crate) struct HandOverReply {
    pub released: i64,
    pub wake: Vec<bool>,
    pub taken: Vec<Taken<()>>,
}

/// Reads `released, wake..., answer...`: `wakes` flags, then the answers
/// of requests of `counts` keys each, up to the first not granted.
pub(crate) fn hand_over(reply: &[i64], wakes: usize, counts: impl IntoIterator<Item = usize>) -> Result<HandOverReply, Failure> {
    let released = reply.first().copied().unwrap_or(0);
    let wake = reply.iter().skip(1).take(wakes).map(|&flag| flag == 1).collect();
    let mut rest = reply.get(1 + wakes..).unwrap_or_default();
    let mut taken_all = Vec::new();
    for count in counts {
        if rest.is_empty() {
            break;
        }
        let (answer, used) = taken(rest, count)?;
        let granted = matches!(answer, Taken::Granted { .. });
        taken_all.push(answer);
        rest = &rest[used.min(rest.len())..];
        if !granted {
            break;
        }
    }
    Ok(HandOverReply { released, wake, taken: taken_all })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_with_fewer_fences_than_keys_has_an_unknown_outcome() {
        assert!(matches!(taken(&[1, 7, 8], 3), Err(Failure::Unknown(_))));
        assert!(matches!(hand_over(&[1, 1, 1, 7], 1, [2]), Err(Failure::Unknown(_))));
        assert!(matches!(taken(&[1, 7, 8, 9], 3), Ok((Taken::Granted { ref fences, .. }, 4)) if *fences == [7, 8, 9]));
    }
}
