//! Why a store operation produced no answer, classified once by the
//! driver's transport, and the error a caller then sees.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use crate::error::{Cause, ErrorCode, LockError};

/// Why a store command produced no answer.
#[derive(Debug, Clone)]
pub enum Failure {
    /// No connection could be made: its socket never came up (the rule is
    /// [`super::reach`]'s); the command did not run. The only failure that
    /// says the store may be down rather than up and refusing this
    /// process, so the only one a policy falls back on.
    Unreachable(Cause),
    /// A connect's socket came up and the server did not answer in time
    /// (its handshake or checks): the command did not run, and the server
    /// is up (stalled, say, by another client's script), so it may hold
    /// keys for other processes.
    // Built without redis, mysql and postgres, no driver's connect is
    // classified so.
    #[cfg_attr(not(any(feature = "redis", feature = "mysql", feature = "postgres")), allow(dead_code))]
    Unanswered(Cause),
    /// The command was (or may have been) sent and no answer came in time:
    /// it may have run.
    Unknown(Cause),
    /// The server answered with an error.
    Refused(Cause),
    /// The server refused the command because another call held a row
    /// lock it needed too long, or locked rows in a cycle with it (a
    /// deadlock's victim): rolled back whole, nothing done. For a try at
    /// taking keys that says the keys are busy, not the store down (see
    /// [`super::acquire`]); a release's hand-over falls back on a plain
    /// give-back (see [`super::core`]); any other command was refused, as
    /// for [`Failure::Refused`].
    Contended(Cause),
    /// The server cannot do what the driver needs: too old, or too few
    /// replicas acknowledged a write (`replicaAcks`). The cause says which.
    Unmet(Cause),
    /// The server refused who we are, or we refused its certificate.
    Denied(Arc<Refusal>),
    /// A statement that sets the driver's tables up (their lookup or
    /// installation) waited out a lock another session held on them (DDL,
    /// a backup's `BLOCK_DDL`), deadlocked, or ran past a statement time
    /// limit: nothing done, and no key was looked at. The server is up and
    /// may be serving other processes (`details.lockedSetUp`).
    SetUpLocked(Cause),
}

/// Why a server and this client did not get as far as a command: the
/// server was reached, so this is never "unreachable", and the fix names
/// what to change (the user, the option, the authority), never a password.
#[derive(Debug)]
pub struct Refusal {
    /// What happened, without the `what:` prefix of the error.
    pub message: String,
    /// What to change: one sentence.
    pub fix: String,
    /// The store's or the TLS library's error.
    pub cause: Cause,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for Refusal {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.cause)
    }
}

impl Failure {
    /// The error a caller of `what` sees: `PROVIDER_FAILED` or
    /// `OUTCOME_UNKNOWN`, with the store's error as cause (`store`: its
    /// name in messages, e.g. "Redis").
    pub fn into_error(self, store: &str, what: &str) -> LockError {
        match self {
            // `details.unreachable`: the one failure a policy falls back on
            // (see `policy::router`).
            Failure::Unreachable(cause) => LockError::new(ErrorCode::ProviderFailed, format!("{what}: {store} is unreachable"))
                .with_details(serde_json::json!({ "unreachable": true }))
                .with_shared_cause(cause),
            Failure::Unanswered(cause) => LockError::new(
                ErrorCode::ProviderFailed,
                format!("{what}: {store} took the connection but did not answer in time"),
            )
            .with_shared_cause(cause),
            Failure::Refused(cause) | Failure::Contended(cause) => {
                LockError::new(ErrorCode::ProviderFailed, format!("{what}: {store} refused the command")).with_shared_cause(cause)
            }
            Failure::Unmet(cause) => LockError::new(ErrorCode::ProviderFailed, format!("{what}: {cause}")).with_shared_cause(cause),
            Failure::Denied(refusal) => LockError::new(ErrorCode::ProviderFailed, format!("{what}: {}", refusal.message))
                .with_fix(refusal.fix.clone())
                .with_shared_cause(refusal.cause.clone()),
            Failure::SetUpLocked(cause) => LockError::new(
                ErrorCode::ProviderFailed,
                format!("{what}: {store} could not look up or install the lock tables: a lock another session held on them (DDL, a backup) outlasted the wait, or a statement time limit cut it"),
            )
            .with_details(serde_json::json!({ "lockedSetUp": true }))
            .with_shared_cause(cause),
            Failure::Unknown(cause) => LockError::new(
                ErrorCode::OutcomeUnknown,
                format!("{what}: {store} did not answer (commandTimeoutMs passed or the connection dropped), so the outcome is unknown"),
            )
            .with_shared_cause(cause),
        }
    }

    /// The failure of a set-up statement (the lookup or creation of the
    /// driver's tables and procedures before its first operation): no
    /// key's row was touched, so a statement refused for a lock it waited
    /// on (a metadata lock on a table, a deadlock, a `statement_timeout`
    /// shorter than the DDL) is not contention for the caller's keys (read
    /// so, every acquire answered `LOCK_BUSY` for as long as the tables
    /// could not be found or made), nor the store down: a policy that fell
    /// back on it moved keys another process held on this store
    /// ([`Failure::SetUpLocked`]).
    pub fn in_set_up(self) -> Failure {
        match self {
            Failure::Contended(cause) => Failure::SetUpLocked(cause),
            other => other,
        }
    }

    /// True when the command may have run (its outcome is unknown).
    pub fn is_unknown(&self) -> bool {
        matches!(self, Failure::Unknown(_))
    }
}
