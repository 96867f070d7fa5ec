//! The synchronisation primitives of [`super::wait_slot`]: std's here. The
//! model check (`tests/wait_slot_model.rs`) compiles the same wait slot
//! against loom's, which is why it names them through this module.

pub(crate) use std::hint::spin_loop;
pub(crate) use std::sync::atomic::{AtomicBool, Ordering};
pub(crate) use std::sync::{Condvar, Mutex, MutexGuard};
