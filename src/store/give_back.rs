//! A give-back of the SQL drivers (postgres, mysql), sent again when its
//! connection was lost under it.

use std::future::Future;

use super::resend::resend_if_lost;
use super::waiters::Waiters;
use super::{Claim, Failure, Freed, Store};
use crate::error::Cause;

/// Gives `claim` back with `call(retry)`, which answers how many keys it
/// gave back, sent again as [`resend_if_lost`] says: the routine's retry
/// counts what either attempt gave back by this token (a released row
/// keeps its token), so a caller hears that its lease was released rather
/// than `OUTCOME_UNKNOWN`. It is safe whatever the first attempt did: only
/// this token's rows are touched, a row released once is not released
/// again, and a row another owner took over no longer carries the token
/// (then not every key counts, and the outcome stays unknown).
///
/// A first attempt refused for another session's row lock
/// ([`Failure::Contended`]: nothing done) is sent once more. The lock's
/// holder is most often a take of another process that holds one of these
/// keys' rows while it waits out a lock on another key: it began its wait
/// first and ends it a lock wait later, so the give-back queued behind it,
/// waiting as long, was refused whenever that take rolled back a little
/// late (a loaded host), though the row was about to be free. A second
/// refusal answers the first. Keys the second attempt no longer finds held
/// may have run out while the two waited, after the release was called: it
/// says so ([`Freed::refused_first`]), for the release of a lease still
/// valid when called to answer the refusal rather than `LEASE_LOST` (review
/// R44), while an acquire giving back a lost try reads it as any answered
/// give-back (review R45).
pub(crate) async fn give_back<S: Store, Sent: Future<Output = Result<i64, Failure>>>(
    claim: &S::Claim,
    waiters: &Waiters<S>,
    pool_size: usize,
    lost_with_its_connection: fn(&Cause) -> bool,
    call: impl Fn(bool) -> Sent,
) -> Result<Freed, Failure> {
    let (refused, (released, first_attempt_lost)) = match resend_if_lost(pool_size, lost_with_its_connection, &call).await {
        Err(Failure::Contended(cause)) => match resend_if_lost(pool_size, lost_with_its_connection, &call).await {
            Err(Failure::Contended(_)) => return Err(Failure::Contended(cause)),
            answered => (Some(cause), answered?),
        },
        answered => (None, answered?),
    };
    if released > 0 {
        // This process's own next waiters need no round trip through the
        // server (its NOTIFY, the release log).
        for name in claim.names() {
            waiters.wake(name);
        }
    }
    Ok(Freed { all: released as usize == claim.len(), first_attempt_lost, refused_first: refused })
}
