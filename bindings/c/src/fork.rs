//! `fork()`: the child inherits the parent's handles but none of its
//! threads, and the file driver's lock files are shared with it (the same
//! open file descriptions). A call of the child on one of them would hang
//! (nothing runs the store drivers' or the completion thread) or act on the
//! parent's locks (a file lease's release unlocks and removes the parent's
//! lock file). So every handle records the process it was made in, by the
//! count of forks this process descends through, and the child's calls on
//! the parent's handles fail with `CLOSED`; its `_free` calls leak them.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

use dokebi_lock::error::{ErrorCode, LockError, Result};

/// How many `fork()`s lie between the first process and this one: 0 in the
/// process that loaded the library, one more in each child.
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// Counts forks from the first provider opened on; before it no handle
/// exists, so none can be inherited unseen.
pub(crate) fn watch() {
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(register);
}

#[cfg(unix)]
fn register() {
    extern "C" {
        fn pthread_atfork(prepare: Option<extern "C" fn()>, parent: Option<extern "C" fn()>, child: Option<extern "C" fn()>) -> i32;
    }
    /// Runs in the child, right after `fork()`: an atomic increment is
    /// async-signal-safe.
    extern "C" fn in_child() {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    // SAFETY: registers a handler that only touches an atomic. It fails only
    // without memory (ENOMEM); fork is then not detected, as before.
    unsafe { pthread_atfork(None, None, Some(in_child)) };
}

/// No `fork()` elsewhere.
#[cfg(not(unix))]
fn register() {}

/// The process a handle made now belongs to.
#[inline(always)]
pub(crate) fn now() -> u32 {
    GENERATION.load(Ordering::Relaxed)
}

/// True when a handle made in process `born` is used by a child forked
/// after it.
#[inline(always)]
pub(crate) fn inherited(born: u32) -> bool {
    now() != born
}

/// `CLOSED` for a handle inherited through `fork()`.
#[inline(always)]
pub(crate) fn check(born: u32) -> Result<()> {
    if inherited(born) {
        return Err(refused());
    }
    Ok(())
}

#[cold]
fn refused() -> LockError {
    LockError::new(
        ErrorCode::Closed,
        "this handle was made before fork(), in the parent process: the child cannot use it (its threads do not survive the \
         fork, and its locks are the parent's); open a provider in the child",
    )
}
