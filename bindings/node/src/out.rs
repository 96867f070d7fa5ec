//! The numbers a local engine exchanges with JS (see [`crate::local`]), in
//! memory Rust owns, seen from JS as a `Float64Array` over an external
//! `ArrayBuffer`.
//!
//! JS may detach that buffer (`buffer.transfer()`, a `structuredClone` or
//! `postMessage` transfer): the memory must outlive whatever still points at
//! it. So each block is shared (`Arc`) between the engine and every buffer
//! made over it, and freed when the last of them goes. The engine never
//! writes to memory it does not hold; a detached view only stops showing the
//! numbers, and [`OutMemory::view`] of a fresh block replaces it.
//!
//! The cells are atomics: a transferred buffer may be read by JS on another
//! thread while the engine writes (JS sees racy but defined values, as with
//! a `SharedArrayBuffer`). Relaxed loads and stores compile to plain moves.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use napi::sys;

use crate::raw::create;

pub use crate::protocol::OUT_LEN;

/// One block of `OUT_LEN` `f64` cells.
pub struct OutMemory([AtomicU64; OUT_LEN]);

impl Default for OutMemory {
    /// Every cell 0.0 (all bits zero).
    fn default() -> Self {
        OutMemory(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl OutMemory {
    pub fn get(&self, index: usize) -> f64 {
        f64::from_bits(self.0[index].load(Ordering::Relaxed))
    }

    pub fn set(&self, index: usize, value: f64) {
        self.0[index].store(value.to_bits(), Ordering::Relaxed);
    }

    /// A fresh block holding the same numbers.
    pub fn copy(&self) -> Arc<OutMemory> {
        let copy = Arc::new(OutMemory::default());
        (0..OUT_LEN).for_each(|index| copy.set(index, self.get(index)));
        copy
    }

    /// A `Float64Array` over `memory`, which it keeps alive until V8 frees
    /// the buffer (also when JS transferred it elsewhere).
    ///
    /// # Safety
    /// `env` is the current thread's environment, inside a Node-API call.
    pub unsafe fn view(env: sys::napi_env, memory: &Arc<OutMemory>) -> napi::Result<sys::napi_value> {
        let data = memory.0.as_ptr() as *mut c_void;
        let owner = Arc::into_raw(memory.clone()) as *mut c_void;
        // SAFETY: `data` points at `size_of::<OutMemory>()` bytes that stay
        // allocated until `release` drops `owner`, which Node calls once,
        // when the buffer's backing store goes. AtomicU64 has the size and
        // alignment of f64, so the cells are the array's elements.
        let buffer =
            unsafe { create(|out| sys::napi_create_external_arraybuffer(env, data, size_of::<OutMemory>(), Some(release), owner, out)) };
        let buffer = buffer.inspect_err(|_| {
            // SAFETY: Node took no ownership of `owner` on failure.
            drop(unsafe { Arc::from_raw(owner as *const OutMemory) });
        })?;
        // SAFETY: a Node-API call on this thread over the buffer just made.
        unsafe { create(|out| sys::napi_create_typedarray(env, sys::TypedarrayType::float64_array, OUT_LEN, buffer, 0, out)) }
    }
}

unsafe extern "C" fn release(_env: sys::napi_env, _data: *mut c_void, owner: *mut c_void) {
    // SAFETY: `owner` is the `Arc` that `view` leaked for this buffer, and
    // Node calls this once per buffer.
    drop(unsafe { Arc::from_raw(owner as *const OutMemory) });
}
