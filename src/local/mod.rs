//! The `local` driver: a keyed FIFO mutex inside one process.
//!
//! [`engine`] is the pure state machine every surface drives; [`backend`] is
//! the thread-safe Rust API over it.

pub mod backend;
mod clock;
mod delivery;
pub mod engine;
mod key_copy;
mod sync;
mod wait_slot;

pub use backend::{LocalBackend, LocalLease};
pub use engine::{Acquired, CancelReason, KeyHolder, KeyView, LeaseId, LocalCounts, LocalEngine, WaiterId};
