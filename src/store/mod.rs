//! The lock layer of every driver that keeps its leases in a store shared
//! by processes (`redis`; `postgres` and `mysql` plug in the same way): written once,
//! whatever the store.
//!
//! A driver supplies a `Store`: how one lease's claim is named, and one
//! round trip each to take it, extend it, give it back, hand it on to this
//! process's next waiters and take back a waiting mark. Everything between
//! those calls lives here:
//! - `waiters`: per key, this process's acquires queue in FIFO order and only
//!   the head talks to the store; the store's wake-ups (a release anywhere)
//!   wake the head;
//! - `handoff`: a release (or a counted/shared head's try) grants the next
//!   local waiters in the same round trip;
//! - `acquire`: one acquire's task, from its places in the queues to a
//!   registered lease, through timeouts, aborts, close and late grants;
//! - `core`: a backend's shared state: releasing, cleaning up after an
//!   unknown outcome, releasing everything at close, counting;
//! - [`backend`] and [`lease`]: the public API ([`StoreBackend`],
//!   [`StoreLease`], [`KeepAlive`]); `runtime`: the drivers' own tokio thread;
//! - `failure`: how a store command failed, and the error a caller sees;
//!   `reach`: how far a connect got, and the one rule that reads a failed
//!   connect unreachable (what a policy falls back on);
//!   `reply`: the answers of the SQL drivers' routines;
//!   `token`: the owner token each claim carries; `connecting`: the part
//!   of a store call (its connect) that an acquire's wait may cut short;
//!   `health`: what `status()` reports of the SQL drivers' connections;
//!   `shared`: what their backends of one connection share; `set_up_retry`:
//!   when they set their tables up again after a try that waited out a lock; `give_back`:
//!   their give-back, and `resend`: a call on an owner's rows (a give-back,
//!   a renewal) sent again when its connection was lost;
//!   `connections`: their runtime and connections in one provider;
//!   `any_certificate`: the TLS verifier of a link told not to verify;
//!   `tls_keys`: the server keys a TLS link takes, and the refusal of others;
//!   `url_query`: the percent-encoded values of their URLs.
//!
//! See `src/DRIVERS.md` for where a new driver goes.

pub(crate) mod acquire;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) mod any_certificate;
pub mod backend;
// A transport that marks no connect (mysql's) is never cut short: built
// without redis and postgres, the marks are never made.
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
mod connecting;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod connections;
pub(crate) mod core;
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub(crate) mod error_chain;
pub(crate) mod failure;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod give_back;
pub(crate) mod handoff;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod health;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod inspect;
pub mod keep_alive;
pub mod lease;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) mod reach;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod reply;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod resend;
pub(crate) mod runtime;
mod seam;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod set_up_retry;
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod shared;
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
pub(crate) mod tls_keys;
pub(crate) mod token;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) mod url_query;
pub(crate) mod waiters;

pub use backend::{StoreBackend, StoreCounts};
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) use connecting::connecting;
pub(crate) use failure::{Failure, Refusal};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use health::Health;
pub use keep_alive::KeepAlive;
pub use lease::StoreLease;
pub(crate) use seam::{Claim, Connectivity, Freed, HandedOver, Retry, Store, StoreConnection, Taken, Terms};
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub(crate) use shared::Shared;
