//! Watches the servers' clocks through the fences they grant, at no cost
//! to the server: a fence is `max(counter + 1, TIME_us)` of the server
//! that granted it (see [`super::scripts`]), so it is at least that
//! server's clock in microseconds at the grant.
//!
//! Fences never repeat while no server that can become primary has a
//! clock more than `fenceRetentionMs` behind the others' (see
//! docs/guarantees.md). A primary whose clock is behind shows itself when it
//! grants from its clock (a key whose counter it does not have, or whose
//! counter lapsed) a fence below the highest fence the connection was
//! granted before this request was even sent: that grant came later, so
//! with agreeing clocks its fence could not be lower. How far below is how
//! far that server's clock is at least behind.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Smaller shortfalls are not reported: the clocks of a cluster's nodes may
/// disagree by a few milliseconds, and one grant per microsecond and key
/// would run a counter that far ahead of the clock.
pub(crate) const REPORTED_FROM: Duration = Duration::from_secs(1);
/// At most one report per connection in this time (a primary whose clock
/// is behind is behind at every grant).
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(10);

/// The highest fence one connection was granted, and when its answer came.
#[derive(Default)]
pub(crate) struct ServerClock {
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    highest: u64,
    answered: Option<Instant>,
    reported: Option<Instant>,
}

impl ServerClock {
    /// A grant of `fence`, to a request sent at `sent`, answered now.
    /// Answers how far behind the granting server's clock is at least when
    /// that is worth a report (at least [`REPORTED_FROM`], and no report
    /// in the last [`REPORT_EVERY`]).
    pub(crate) fn granted(&self, fence: u64, sent: Instant) -> Option<Duration> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        // Only a request sent after the highest fence's answer came must be
        // granted above it: two requests in flight at once may be granted
        // in either order.
        let behind = match seen.answered {
            Some(answered) if sent > answered => Duration::from_micros(seen.highest.saturating_sub(fence)),
            _ => Duration::ZERO,
        };
        if fence > seen.highest {
            seen.highest = fence;
            seen.answered = Some(now);
        }
        if behind < REPORTED_FROM || seen.reported.is_some_and(|at| now.duration_since(at) < REPORT_EVERY) {
            return None;
        }
        seen.reported = Some(now);
        Some(behind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    #[test]
    fn a_fence_below_one_answered_before_the_request_was_sent_is_reported_once() {
        let clock = ServerClock::default();
        assert_eq!(clock.granted(100 * S, Instant::now()), None);
        std::thread::sleep(Duration::from_millis(1));
        let sent = Instant::now();
        assert_eq!(clock.granted(70 * S, sent), Some(Duration::from_secs(30)));
        // Behind again at once: reported already.
        assert_eq!(clock.granted(71 * S, Instant::now()), None);
    }

    #[test]
    fn requests_in_flight_together_may_be_granted_in_either_order() {
        let clock = ServerClock::default();
        let sent = Instant::now();
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(clock.granted(100 * S, Instant::now()), None);
        // Sent before the higher fence's answer came: no finding.
        assert_eq!(clock.granted(97 * S, sent), None);
    }

    #[test]
    fn shortfalls_below_a_second_are_not_reported() {
        let clock = ServerClock::default();
        assert_eq!(clock.granted(100 * S, Instant::now()), None);
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(clock.granted(100 * S - 999_999, Instant::now()), None);
        assert_eq!(clock.granted(100 * S - S, Instant::now()), Some(REPORTED_FROM));
    }
}
