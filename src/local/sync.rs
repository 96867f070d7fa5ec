//! The synchronisation primitives of [`super::wait_slot`] and
//! [`super::delivery`]: std's here. The model checks
//! (`tests/wait_slot_model.rs`, `tests/delivery_model.rs`) compile the same
//! files against loom's, which is why they name them through this module.

pub(crate) use std::hint::spin_loop;
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};
