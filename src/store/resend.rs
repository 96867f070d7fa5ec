//! A call of the SQL drivers (postgres, mysql) on one owner's rows, sent
//! again when its connection was lost under it.

use std::future::Future;

use super::Failure;
use crate::error::Cause;

/// Sends `call(false)`; when its connection was lost under it (a session
/// ended, a connection the server had closed while it sat in the pool, a
/// server restarted: `lost_with_its_connection`), sends `call(true)` on
/// another, as a retry. Only for a call that is safe to send twice: one
/// that touches nothing but its own token's rows and counts what it finds
/// done (a give-back, a renewal). Not after a timeout: the first attempt
/// may still be on its way, and a retry would wait behind it. Answers the
/// retry's answer with the first attempt's cause (that attempt may have
/// run); a retry that fails otherwise leaves the outcome unknown.
///
/// The pool's other connections may have been lost with it: each that
/// fails is replaced, so one of `pool_size` retries runs on a fresh one.
pub(crate) async fn resend_if_lost<T, Sent: Future<Output = Result<T, Failure>>>(
    pool_size: usize,
    lost_with_its_connection: fn(&Cause) -> bool,
    call: impl Fn(bool) -> Sent,
) -> Result<(T, Option<Cause>), Failure> {
    match call(false).await {
        Ok(answer) => Ok((answer, None)),
        Err(Failure::Unknown(cause)) if lost_with_its_connection(&cause) => {
            let mut retries = pool_size;
            loop {
                match call(true).await {
                    Ok(answer) => return Ok((answer, Some(cause))),
                    Err(Failure::Unknown(again)) if retries > 1 && lost_with_its_connection(&again) => retries -= 1,
                    // The first attempt may have run.
                    Err(_) => return Err(Failure::Unknown(cause)),
                }
            }
        }
        Err(failure) => Err(failure),
    }
}
