//! How the thread-safe backend hands grants to waiters: the engine behind a
//! mutex, each waiter's [`WaitSlot`], and what one release or cancel does
//! with the grants the engine made (several, for a shared or counted key).
//!
//! The protocol, model-checked with loom in `tests/delivery_model.rs` (which
//! compiles this file against loom's primitives through `super::sync`):
//! - the engine grants and dequeues under its mutex; each grant is delivered
//!   to its slot after the mutex is dropped, so a woken waiter never
//!   contends with the thread that woke it;
//! - a grant whose waiter gave up in the meantime comes back refused and is
//!   released again (which may grant others), so a lease is never lost or
//!   held twice;
//! - after the last grant, the waiter now first in line for that lease's key
//!   is told it is next, so that it spins rather than sleeps.

use super::engine::{CancelReason, LeaseId, LocalEngine, WaiterId};
use super::sync::{Arc, Mutex, MutexGuard};
use super::wait_slot::WaitSlot;

/// The engine of a thread-safe backend; waiters are woken through their slots.
pub(crate) type Engine = Mutex<LocalEngine<Arc<WaitSlot<LeaseId>>>>;

#[inline]
pub(crate) fn lock(engine: &Engine) -> MutexGuard<'_, LocalEngine<Arc<WaitSlot<LeaseId>>>> {
    // A panic while holding the lock cannot leave the engine half-updated in a
    // way later calls could observe worse than the panic itself; keep serving.
    engine.lock().unwrap_or_else(|e| e.into_inner())
}

/// Releases `id` and delivers what that let in; false when `id` was not held.
#[inline]
pub(crate) fn release(engine: &Engine, id: LeaseId) -> bool {
    let mut guard = lock(engine);
    if !guard.release(id) {
        return false;
    }
    deliver(engine, guard);
    true
}

/// Releases every lease that holds `key` and delivers what that let in:
/// how many it released.
pub(crate) fn force_release(engine: &Engine, key: &str) -> u32 {
    let mut guard = lock(engine);
    let holders = guard.holders_of(key);
    for &lease in &holders {
        guard.release(lease);
    }
    deliver(engine, guard);
    holders.len() as u32
}

/// Takes a waiter out of its queues (true when it was still queued) and
/// delivers what that let in.
pub(crate) fn cancel(engine: &Engine, waiter: WaiterId, reason: CancelReason) -> bool {
    let mut guard = lock(engine);
    let cancelled = guard.cancel(waiter, reason).is_some();
    deliver(engine, guard);
    cancelled
}

/// Delivers the engine's grants to their waiters, each after the engine's
/// lock is dropped; a grant whose waiter gave up meanwhile is released
/// again. After the last grant, tells the waiter now first in line for that
/// lease's key that it is next.
#[inline]
pub(crate) fn deliver<'a>(engine: &'a Engine, guard: MutexGuard<'a, LocalEngine<Arc<WaitSlot<LeaseId>>>>) {
    // Most releases let nobody in.
    if guard.has_granted() {
        deliver_grants(engine, guard);
    }
}

fn deliver_grants<'a>(engine: &'a Engine, mut guard: MutexGuard<'a, LocalEngine<Arc<WaitSlot<LeaseId>>>>) {
    while let Some((waiter, lease)) = guard.pop_granted() {
        let last = !guard.has_granted();
        let next = if last { guard.next_waiter(lease).cloned() } else { None };
        drop(guard);
        match waiter.grant(lease) {
            Ok(()) if last => {
                // After the grant: the new holder comes first.
                if let Some(next) = next {
                    next.promote();
                }
                return;
            }
            Ok(()) => guard = lock(engine),
            Err(refused) => {
                guard = lock(engine);
                guard.release(refused);
            }
        }
    }
}
