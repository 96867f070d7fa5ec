//! A give-back of the SQL drivers (postgres, mysql), sent again when its
//! connection was lost under it.

use std::future::Future;

use super::waiters::Waiters;
use super::{Claim, Failure, Freed, Store};
use crate::error::Cause;

/// Gives `claim` back with `call(retry)`, which answers how many keys it
/// gave back. A first call whose connection was lost under it (a session
/// ended, a connection cut: `lost_with_its_connection`) is sent again on
/// another, as a retry: the routine counts what either attempt gave back
/// by this token (a released row keeps its token), so a caller hears that
/// its lease was released rather than `OUTCOME_UNKNOWN`. It is safe
/// whatever the first attempt did: only this token's rows are touched, a
/// row released once is not released again, and a row another owner took
/// over no longer carries the token (then not every key counts, and the
/// outcome stays unknown). Not after a timeout: the first attempt may still
/// be on its way, and a retry would wait behind it.
///
/// The pool's other connections may have been lost with it: each that
/// fails is replaced, so one of `pool_size` retries runs on a fresh one.
pub(crate) async fn give_back<S: Store, Sent: Future<Output = Result<i64, Failure>>>(
    claim: &S::Claim,
    waiters: &Waiters<S>,
    pool_size: usize,
    lost_with_its_connection: fn(&Cause) -> bool,
    call: impl Fn(bool) -> Sent,
) -> Result<Freed, Failure> {
    let (released, first_attempt_lost) = match call(false).await {
        Ok(released) => (released, None),
        Err(Failure::Unknown(cause)) if lost_with_its_connection(&cause) => {
            let mut retries = pool_size;
            loop {
                match call(true).await {
                    Ok(released) => break (released, Some(cause)),
                    Err(Failure::Unknown(again)) if retries > 1 && lost_with_its_connection(&again) => retries -= 1,
                    // The first attempt may have run.
                    Err(_) => return Err(Failure::Unknown(cause)),
                }
            }
        }
        Err(failure) => return Err(failure),
    };
    if released > 0 {
        // This process's own next waiters need no round trip through the
        // server (its NOTIFY, the release log).
        for name in claim.names() {
            waiters.wake(name);
        }
    }
    Ok(Freed { all: released as usize == claim.len(), first_attempt_lost })
}
