//! When a SQL driver's backend sets its tables up again after a try that
//! waited out a lock ([`Failure::SetUpLocked`]). An upgrade's `ALTER` waits
//! a short, bounded time for its table lock, and while it waits every
//! process's statements on that table queue behind it; tried again by
//! every operation, it would hold them up over and over for as long as the
//! transaction in its way lasts (a dump, a long report). So for
//! [`SetUpRetry::AFTER`] after such a try, operations answer its failure
//! again at once, sending nothing (review R64).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::failure::Failure;

/// The last set-up try that waited out a lock, and when it ended.
#[derive(Default)]
pub(crate) struct SetUpRetry {
    last: Mutex<Option<(Instant, Failure)>>,
}

impl SetUpRetry {
    /// How long a set-up that waited out a lock is not tried again.
    pub const AFTER: Duration = Duration::from_secs(2);

    /// The failure of a set-up try that waited out a lock less than
    /// [`Self::AFTER`] ago.
    pub fn pending(&self) -> Result<(), Failure> {
        match &*self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) {
            Some((at, failure)) if at.elapsed() < Self::AFTER => Err(failure.clone()),
            _ => Ok(()),
        }
    }

    /// `outcome` of a set-up try, kept when it waited out a lock.
    pub fn record<T>(&self, outcome: Result<T, Failure>) -> Result<T, Failure> {
        if let Err(failure @ Failure::SetUpLocked(_)) = &outcome {
            *self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((Instant::now(), failure.clone()));
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_set_up_that_waited_out_a_lock_is_not_tried_again_at_once() {
        let retry = SetUpRetry::default();
        assert!(retry.pending().is_ok());
        let refused = Failure::Refused(Arc::new(std::io::Error::other("refused")));
        assert!(retry.record::<()>(Err(refused)).is_err());
        assert!(retry.pending().is_ok(), "only a lock waited out holds the next try back");
        let locked = Failure::SetUpLocked(Arc::new(std::io::Error::other("lock timeout")));
        assert!(retry.record::<()>(Err(locked)).is_err());
        assert!(matches!(retry.pending(), Err(Failure::SetUpLocked(_))));
        *retry.last.lock().unwrap() =
            Some((Instant::now() - SetUpRetry::AFTER, Failure::SetUpLocked(Arc::new(std::io::Error::other("old")))));
        assert!(retry.pending().is_ok(), "tried again once AFTER passed");
    }
}
