//! The local driver's fast path: one core `LocalEngine` per backend, driven
//! on the JS thread only (no mutex, no runtime, no threadsafe function).
//!
//! The engine is exposed as a plain JS object whose methods are raw N-API
//! callbacks carrying the engine as their data pointer: napi-rs class methods
//! cost several times more per call (receiver checks, borrow tracking), and
//! these calls are the whole cost of an uncontended acquire + release.
//!
//! The hot calls (`acquire`, `tryAcquire`, `release`) exchange numbers through
//! a `Float64Array` over memory the engine owns (`out()`, see [`crate::out`]):
//! the engine writes its result code to `out[0]` and ids to `out[1..4]`, and
//! `release` reads the lease id from `out[1..3]`. They return `undefined`, so
//! an acquire or a release creates no JS value and reads no argument but the
//! key, saving four `napi_get_value_*` / `napi_create_*` calls per acquire +
//! release. A lease id is `(slot, fence)` and a waiter id
//! `(slot, serial)`; the core recognises stale ids, so a released handle never
//! releases a later lease that reuses its slot. Waiter payloads are waiter
//! slots, which the JS layer uses as indexes into its table of pending
//! promises.
//!
//! A call that grants several waiters (a shared key's readers behind a
//! writer, the units a counted lease gave back) reports up to 16 of them at
//! once, the first in `out[1..4]` and the others after it: a writer's
//! release that let in 7 readers made 8 calls, and a mixed reader/writer
//! load of 64 tasks 2.75 calls per acquire + release (2.0 now).
//!
//! Deferred release: while no acquire of the backend is queued, a release
//! can hand on to nobody, so its only effect is on the engine's state, which
//! only the next call to the engine can observe. The JS layer then writes
//! the lease id to `out[4..6]` instead of calling `release`, and every
//! method first ends that release ([`LocalState::release_deferred`]): an
//! uncontended acquire + release is one call across N-API, not two. (An
//! acquire that queues is a call, so it ends the deferred release before it
//! queues: a deferred release never has a waiter to hand on to.)

use std::cell::RefCell;
use std::ffi::CStr;
use std::ptr;
use std::rc::Rc;
use std::sync::Arc;

use dokebi_lock::local::{Acquired, CancelReason, LeaseId, LocalEngine, WaiterId};
use dokebi_lock::options::LocalOptions;
use dokebi_lock::{ErrorCode, HolderLabel, LockError, LockKind, LockMode};
use napi::bindgen_prelude::{FromNapiValue, ToNapiValue, Utf16String};
use napi::sys;

use crate::error::{stash, ErrorInfo};
use crate::guard;
use crate::inspect::InspectionInfo;
use crate::key::KeyReader;
use crate::out::OutMemory;
use crate::raw::{call_info, check, object_of, or_throw, Method};
use crate::status::CountsInfo;

use crate::protocol::{
    ARGUMENT_KEYS, DEFERRED_FENCE, DEFERRED_SLOT, FAILED, FREED, GRANTED, HANDED_ON, HANDED_ON_MORE, KEYS_AS_ARGUMENTS, LABELLED, MAY_WAIT,
    MORE_AT, MORE_COUNT, MORE_MAX, NOT_HELD, QUEUED, SEVERAL_KEYS,
};

/// One local backend's lock state.
struct LocalState {
    engine: LocalEngine<u32>,
    keys: KeyReader,
    /// The keys of the last acquire of several (buffers reused).
    key_set: Vec<String>,
    /// The block JS's current view shows.
    out: Arc<OutMemory>,
    /// The provider's `holder`: the label of every holder here.
    holder: HolderLabel,
}

impl LocalState {
    /// The engine, once the release JS deferred (if any) has ended: every
    /// method reaches the engine through here, or ends that release first
    /// itself (the acquires, which also borrow the keys they read).
    fn engine(&mut self) -> &mut LocalEngine<u32> {
        self.release_deferred();
        &mut self.engine
    }

    /// Ends the release JS deferred to this call, if any. The lease is held
    /// (the JS layer defers only the first release of a lease of an open
    /// backend) and nobody waits for its keys (it defers only while nothing
    /// is queued), so it frees them and grants nothing.
    fn release_deferred(&mut self) {
        let fence = self.out.get(DEFERRED_FENCE);
        if fence == 0.0 {
            return;
        }
        self.out.set(DEFERRED_FENCE, 0.0);
        let lease = LeaseId { slot: self.out.get(DEFERRED_SLOT) as u32, fence: fence as u64 };
        let released = self.engine.release(lease);
        debug_assert!(released && !self.engine.has_granted(), "a deferred release must free a held lease and grant nothing");
    }

    /// Reads `key` for a call that reads the engine once it is open
    /// (`inspect`, `holdersOf`): `CLOSED` once closed, else the key's own
    /// refusal. Through [`LocalState::engine`], so a release JS deferred
    /// ends first, as before any other call.
    unsafe fn read_open_key(&mut self, env: sys::napi_env, key: sys::napi_value) -> Result<(), LockError> {
        if self.engine().is_closed() {
            return Err(LockError::closed());
        }
        // SAFETY: our callers pass their own callback's `env` and argument `key`.
        unsafe { self.keys.read(env, key) }
    }

    fn report(&mut self, status: f64, ids: &[f64]) {
        self.out.set(0, status);
        ids.iter().enumerate().for_each(|(index, id)| self.out.set(index + 1, *id));
    }

    /// `acquire(key: string)` / `tryAcquire(key: string)`:
    /// `out[0]` is GRANTED, QUEUED or FAILED.
    unsafe fn acquire(&mut self, env: sys::napi_env, key: sys::napi_value, may_wait: bool) {
        self.release_deferred();
        // SAFETY: our caller (the `acquire` callback) passes its own `env` and argument `key`.
        if let Err(error) = unsafe { self.keys.read(env, key) } {
            return self.failed(error);
        }
        let acquired = self.engine.acquire(self.keys.key(), may_wait, |waiter| waiter.slot);
        let acquired = acquired.map_err(|error| self.engine.told_holders(error, &[self.keys.key()], &self.holder));
        self.acquired(acquired);
    }

    /// `acquireKind(keys)` / `acquireKind(...keys)`: as `acquire`, of one
    /// key (a string) or several (an array of strings, or its `count`
    /// arguments), in the kind the JS layer checked (the engine checks it
    /// again) and wrote to `out = [flags, shared, limit, weight]` (numbers,
    /// where N-API arguments would cost a call each; flags are MAY_WAIT,
    /// SEVERAL_KEYS, KEYS_AS_ARGUMENTS and LABELLED: then the lease's own
    /// holder label is the argument after the keys).
    unsafe fn acquire_kind(&mut self, env: sys::napi_env, args: &[sys::napi_value; ARGUMENT_KEYS], count: usize) {
        self.release_deferred();
        let out = &self.out;
        let flags = out.get(0) as u32;
        let (may_wait, shared) = (flags & MAY_WAIT != 0, out.get(1) != 0.0);
        // Saturating casts: the JS layer wrote integers from 1 to u32::MAX.
        let kind = LockKind {
            mode: if shared { LockMode::Shared } else { LockMode::Exclusive },
            limit: out.get(2) as u32,
            weight: out.get(3) as u32,
        };
        // Read now, its error told after the keys' (as the store drivers tell it).
        // SAFETY: our caller passes its own `env` and arguments.
        let label = (flags & LABELLED != 0).then(|| unsafe { read_label(env, args[1]) }).transpose();
        let acquired = if flags & SEVERAL_KEYS != 0 {
            let read = if flags & KEYS_AS_ARGUMENTS != 0 {
                // SAFETY: our caller (the `acquireKind` callback) passes its own `env` and arguments.
                unsafe { self.read_key_arguments(env, args, count) }
            } else {
                // SAFETY: as above; the JS layer found the argument to be an array (anything else
                // reads as no keys: an INVALID_ARGUMENT).
                unsafe { self.read_key_array(env, args[0]) }
            };
            match read.and(label) {
                Ok(label) => self.engine.acquire_many(&self.key_set, kind, label, may_wait, |waiter| waiter.slot).map_err(|error| {
                    let keys: Vec<&str> = self.key_set.iter().map(String::as_str).collect();
                    self.engine.told_holders(error, &keys, &self.holder)
                }),
                Err(error) => Err(error),
            }
        } else {
            // One key: read as `acquire` reads it, with no allocation.
            // SAFETY: our caller passes its own `env` and arguments.
            match unsafe { self.keys.read(env, args[0]) }.and(label) {
                Ok(label) => self
                    .engine
                    .acquire_one(self.keys.key(), kind, label, may_wait, |waiter| waiter.slot)
                    .map_err(|error| self.engine.told_holders(error, &[self.keys.key()], &self.holder)),
                Err(error) => Err(error),
            }
        };
        self.acquired(acquired);
    }

    /// An acquire's outcome in `out`: GRANTED, QUEUED or FAILED.
    fn acquired(&mut self, acquired: Result<Acquired, LockError>) {
        match acquired {
            Ok(Acquired::Granted(lease)) => self.report(GRANTED, &[lease.slot.into(), lease.fence as f64]),
            Ok(Acquired::Queued(waiter)) => self.report(QUEUED, &[waiter.slot.into(), waiter.serial as f64]),
            Err(error) => self.failed(error),
        }
    }

    /// Reads an array of string keys into `key_set`, under the core's key
    /// rules.
    unsafe fn read_key_array(&mut self, env: sys::napi_env, array: sys::napi_value) -> Result<(), LockError> {
        let mut count = 0;
        // SAFETY: our caller passes its callback's `env` and an array argument; `count` is a local.
        unsafe { sys::napi_get_array_length(env, array, &mut count) };
        self.key_set.truncate(count as usize);
        for index in 0..count {
            let mut key = ptr::null_mut();
            // SAFETY: as above; `index` is below the array's length, `key` a local.
            unsafe { sys::napi_get_element(env, array, index, &mut key) };
            // SAFETY: `env` is the callback's and `key` a value of this callback's scope.
            unsafe { self.store_key(env, index as usize, key) }?;
        }
        Ok(())
    }

    /// Reads the call's `count` arguments, each a string key, into
    /// `key_set`.
    unsafe fn read_key_arguments(
        &mut self,
        env: sys::napi_env,
        args: &[sys::napi_value; ARGUMENT_KEYS],
        count: usize,
    ) -> Result<(), LockError> {
        // The JS layer passes more keys as an array; taking fewer keys than
        // asked would be a lease that does not cover them all.
        let Some(args) = args.get(..count) else {
            return Err(LockError::new(ErrorCode::InvalidArgument, format!("acquireKind takes at most {ARGUMENT_KEYS} keys as arguments")));
        };
        self.key_set.truncate(count);
        for (index, key) in args.iter().enumerate() {
            // SAFETY: our caller passes its callback's `env` and arguments.
            unsafe { self.store_key(env, index, *key) }?;
        }
        Ok(())
    }

    /// Reads string key `value` into `key_set[index]` (whose strings are
    /// reused from call to call), under the core's key rules.
    unsafe fn store_key(&mut self, env: sys::napi_env, index: usize, value: sys::napi_value) -> Result<(), LockError> {
        // SAFETY: our caller passes its callback's `env` and a value of this callback's scope.
        unsafe { self.keys.read(env, value) }?;
        match self.key_set.get_mut(index) {
            Some(slot) => {
                slot.clear();
                slot.push_str(self.keys.key());
            }
            None => self.key_set.push(self.keys.key().to_owned()),
        }
        Ok(())
    }

    fn failed(&mut self, error: LockError) {
        stash(error);
        self.report(FAILED, &[]);
    }

    /// `release()` of the lease `out[1..3] = [slot, fence]`:
    /// `out[0]` is NOT_HELD, FREED, or the first grant it made.
    fn release(&mut self) {
        let (slot, fence) = (self.out.get(1), self.out.get(2));
        if self.engine().release(LeaseId { slot: slot as u32, fence: fence as u64 }) {
            self.next_grant();
        } else {
            self.report(NOT_HELD, &[]);
        }
    }

    /// The next grants the last release or cancel made: `out[0]` is
    /// HANDED_ON or HANDED_ON_MORE with the first in `out[1..4]` and up to
    /// MORE_MAX others after it (`out[MORE_COUNT]` of them), else FREED.
    fn next_grant(&mut self) {
        let Some((waiter, lease)) = self.engine().pop_granted() else {
            return self.report(FREED, &[]);
        };
        let mut more = 0;
        while more < MORE_MAX {
            let Some((waiter, lease)) = self.engine.pop_granted() else { break };
            let at = MORE_AT + 3 * more;
            self.out.set(at, lease.slot.into());
            self.out.set(at + 1, lease.fence as f64);
            self.out.set(at + 2, waiter.into());
            more += 1;
        }
        self.out.set(MORE_COUNT, more as f64);
        let status = if self.engine.has_granted() { HANDED_ON_MORE } else { HANDED_ON };
        self.report(status, &[lease.slot.into(), lease.fence as f64, waiter.into()]);
    }
}

/// The engine as handed to JS: `{ waitTimeoutMs, slowAcquireMs, slowHoldMs,
/// out, acquire, tryAcquire, release, cancel, isHeld, close, counts, inspect,
/// holdersOf }` (a threshold is `null` when disabled). It exchanges numbers
/// through the view `out()` returns ([`OUT_LEN`](crate::protocol::OUT_LEN)
/// elements).
pub struct LocalEngineObject {
    state: LocalState,
}

impl LocalEngineObject {
    pub fn new(options: LocalOptions, holder: HolderLabel) -> Self {
        LocalEngineObject {
            state: LocalState {
                keys: KeyReader::new(options.max_key_bytes),
                key_set: Vec::new(),
                engine: LocalEngine::new(options),
                out: Arc::default(),
                holder,
            },
        }
    }
}

type Shared = RefCell<LocalState>;

const METHODS: [(&CStr, Method); 13] = [
    (c"out", out),
    (c"acquire", acquire::<true>),
    (c"tryAcquire", acquire::<false>),
    (c"acquireKind", acquire_kind),
    (c"release", release),
    (c"nextGrant", next_grant),
    (c"cancel", cancel),
    (c"isHeld", is_held),
    (c"close", close),
    (c"counts", counts),
    (c"inspect", inspect),
    (c"holdersOf", holders_of),
    (c"timedOut", timed_out),
];

impl ToNapiValue for LocalEngineObject {
    unsafe fn to_napi_value(env: sys::napi_env, value: Self) -> napi::Result<sys::napi_value> {
        let options = *value.state.engine.options();
        let shared: Rc<Shared> = Rc::new(RefCell::new(value.state));
        // SAFETY: napi-rs calls `to_napi_value` with the current env on its JS thread.
        let object = unsafe { object_of(env, &shared, &METHODS) }?;
        let settings = [
            (c"waitTimeoutMs", Some(options.wait_timeout_ms)),
            (c"slowAcquireMs", options.thresholds.slow_acquire_ms),
            (c"slowHoldMs", options.thresholds.slow_hold_ms),
        ];
        for (name, ms) in settings {
            // SAFETY: napi-rs calls `to_napi_value` with the current env on its JS thread.
            let value = unsafe { Option::<u32>::to_napi_value(env, ms) }?;
            // SAFETY: as above; `object` and `value` were just created, `name` is NUL-terminated.
            unsafe { check(sys::napi_set_named_property(env, object, name.as_ptr(), value)) }?;
        }
        Ok(object)
    }
}

/// `out(): Float64Array`: the numbers' view, over a fresh block that holds
/// the same numbers and that the engine uses from now on. The JS layer calls
/// it at open, and again if its view was detached.
unsafe extern "C" fn out(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; `out` is one of METHODS, created with
    // an `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, []) = unsafe { call_info::<Shared, 0>(env, info) };
    // SAFETY: `env` is this callback's, on the JS thread.
    unsafe {
        or_throw(env, || {
            let mut state = state.borrow_mut();
            state.out = state.out.copy();
            OutMemory::view(env, &state.out)
        })
    }
}

/// `acquire(key)` (`MAY_WAIT`) and `tryAcquire(key)`: see [`LocalState::acquire`].
unsafe extern "C" fn acquire<const MAY_WAIT: bool>(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, [key]) = unsafe { call_info::<Shared, 1>(env, info) };
    // SAFETY: `env` and `key` are this callback's.
    if let Err(error) = guard::catch(|| unsafe { state.borrow_mut().acquire(env, key, MAY_WAIT) }) {
        failed(state, error);
    }
    ptr::null_mut()
}

/// `acquireKind(keys)` / `acquireKind(...keys)`: see [`LocalState::acquire_kind`].
unsafe extern "C" fn acquire_kind(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, count, args) = unsafe { call_info::<Shared, ARGUMENT_KEYS>(env, info) };
    // SAFETY: `env` and `args` are this callback's.
    if let Err(error) = guard::catch(|| unsafe { state.borrow_mut().acquire_kind(env, &args, count) }) {
        failed(state, error);
    }
    ptr::null_mut()
}

/// `release()`: see [`LocalState::release`].
unsafe extern "C" fn release(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, []) = unsafe { call_info::<Shared, 0>(env, info) };
    if let Err(error) = guard::catch(|| state.borrow_mut().release()) {
        failed(state, error);
    }
    ptr::null_mut()
}

/// `nextGrant()`: see [`LocalState::next_grant`].
unsafe extern "C" fn next_grant(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, []) = unsafe { call_info::<Shared, 0>(env, info) };
    if let Err(error) = guard::catch(|| state.borrow_mut().next_grant()) {
        failed(state, error);
    }
    ptr::null_mut()
}

/// `cancel(slot, serial, timedOut): boolean`: true when the waiter was still
/// queued, false when it was already granted or rejected. `timedOut` tells a
/// wait that ran out from an aborted one. Leaving may let waiters behind it
/// in: `out` then reports the first grant, as `release` does.
unsafe extern "C" fn cancel(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, args) = unsafe { call_info::<Shared, 3>(env, info) };
    // SAFETY: `env` and the arguments are this callback's.
    let waiter = WaiterId { slot: unsafe { uint(env, args[0]) }, serial: unsafe { double(env, args[1]) } as u64 };
    // SAFETY: `env` and the argument are this callback's.
    let reason = if unsafe { boolean(env, args[2]) } { CancelReason::TimedOut } else { CancelReason::Aborted };
    let cancel = || {
        let mut state = state.borrow_mut();
        let cancelled = state.engine().cancel(waiter, reason).is_some();
        state.next_grant();
        cancelled
    };
    // SAFETY: `env` is this callback's, on the JS thread.
    unsafe { or_throw(env, || Ok(bool_value(env, cancel()))) }
}

/// `isHeld(slot, fence): boolean`
unsafe extern "C" fn is_held(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, args) = unsafe { call_info::<Shared, 2>(env, info) };
    // SAFETY: `env` and the arguments are this callback's.
    let lease = unsafe { lease_id(env, &args) };
    // SAFETY: `env` is this callback's, on the JS thread.
    unsafe { or_throw(env, || Ok(bool_value(env, state.borrow_mut().engine().is_held(lease)))) }
}

/// `close(): number[]`: the waiter slots to reject, oldest first per key.
unsafe extern "C" fn close(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, _) = unsafe { call_info::<Shared, 0>(env, info) };
    // SAFETY: `env` is this callback's, on the JS thread.
    unsafe { or_throw(env, || Vec::<u32>::to_napi_value(env, state.borrow_mut().engine().close())) }
}

/// `counts(): { held, waiting, acquired, timedOut }`
unsafe extern "C" fn counts(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, _) = unsafe { call_info::<Shared, 0>(env, info) };
    // SAFETY: `env` is this callback's, on the JS thread.
    unsafe { or_throw(env, || CountsInfo::to_napi_value(env, CountsInfo::from(state.borrow_mut().engine().counts()))) }
}

/// `inspect(key): InspectionInfo | null` (`backend` empty: the JS layer
/// names it); `null` when refused, the error then in `takeError()`.
unsafe extern "C" fn inspect(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, [key]) = unsafe { call_info::<Shared, 1>(env, info) };
    // SAFETY: `env` and `key` are this callback's, on the JS thread.
    unsafe {
        or_throw(env, || {
            let mut state = state.borrow_mut();
            let inspection = state
                .read_open_key(env, key)
                .map(|()| InspectionInfo::from(state.engine.inspect(state.keys.key()).inspection("", &state.holder)));
            or_null(env, inspection)
        })
    }
}

/// `holdersOf(key): number[] | null`: the leases that hold `key`, flat as
/// `[slot, fence, slot, fence, ...]` (the JS layer's `forceRelease`
/// releases each as its holder would); `null` when refused, the error then
/// in `takeError()`.
unsafe extern "C" fn holders_of(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, [key]) = unsafe { call_info::<Shared, 1>(env, info) };
    // SAFETY: `env` and `key` are this callback's, on the JS thread.
    unsafe {
        or_throw(env, || {
            let mut state = state.borrow_mut();
            let holders = state.read_open_key(env, key).map(|()| {
                let leases = state.engine.holders_of(state.keys.key());
                leases.iter().flat_map(|lease| [f64::from(lease.slot), lease.fence as f64]).collect::<Vec<f64>>()
            });
            or_null(env, holders)
        })
    }
}

/// `timedOut(ms, key): ErrorInfo`: the `WAIT_TIMEOUT` of a wait of `ms`
/// for `key` (a string, or an array of keys), its details the holders of
/// the key that kept it out, read now (the waiter has left its queues).
unsafe extern "C" fn timed_out(env: sys::napi_env, info: sys::napi_callback_info) -> sys::napi_value {
    // SAFETY: Node passes this callback's `env` and `info`; the function was created with an
    // `Rc<Shared>` as data in `to_napi_value`.
    let (state, _, [ms, key]) = unsafe { call_info::<Shared, 2>(env, info) };
    // SAFETY: `env` and the argument are this callback's.
    let error = LockError::wait_timeout(std::time::Duration::from_millis(unsafe { uint(env, ms) }.into()));
    let mut several = false;
    // SAFETY: as above; `several` is a local.
    unsafe { sys::napi_is_array(env, key, &mut several) };
    // SAFETY: `env` is this callback's, on the JS thread.
    unsafe {
        or_throw(env, || {
            let mut state = state.borrow_mut();
            state.release_deferred();
            let state = &mut *state;
            // SAFETY: `env` and `key` are this callback's. The keys were read once already
            // (by the acquire): a key that no longer reads leaves the error as it is.
            let read = if several { state.read_key_array(env, key) } else { state.keys.read(env, key) };
            let error = match read {
                Ok(()) if several => {
                    let keys: Vec<&str> = state.key_set.iter().map(String::as_str).collect();
                    state.engine.told_holders(error, &keys, &state.holder)
                }
                Ok(()) => state.engine.told_holders(error, &[state.keys.key()], &state.holder),
                Err(_) => error,
            };
            ErrorInfo::to_napi_value(env, crate::error::info(error))
        })
    }
}

/// `value` as JS, or `null` with the error stashed for `takeError()`.
unsafe fn or_null<T: ToNapiValue>(env: sys::napi_env, value: Result<T, LockError>) -> napi::Result<sys::napi_value> {
    match value {
        // SAFETY: our callers pass their own callback's `env`, on the JS thread.
        Ok(value) => unsafe { T::to_napi_value(env, value) },
        Err(error) => {
            stash(error);
            // SAFETY: as above.
            unsafe { Option::<u32>::to_napi_value(env, None) }
        }
    }
}

/// A panic in an acquire or release is its failure: `out[0]` is FAILED and
/// the error waits in `takeError()`. (The panic let go of its borrow while
/// unwinding; no JS runs inside a method, so nothing else holds one.)
fn failed(state: &Shared, error: LockError) {
    state.borrow_mut().failed(error);
}

unsafe fn lease_id(env: sys::napi_env, args: &[sys::napi_value]) -> LeaseId {
    // SAFETY: the callers pass their own callback's `env` and arguments.
    LeaseId { slot: unsafe { uint(env, args[0]) }, fence: unsafe { double(env, args[1]) } as u64 }
}

// Readers for arguments the JS layer always passes with the right type; a
// wrong type reads as 0 / false, which names no lease or waiter.
unsafe fn uint(env: sys::napi_env, value: sys::napi_value) -> u32 {
    let mut result = 0;
    // SAFETY: the callers pass their own callback's `env` and argument; `result` is a local (left
    // at 0 when the value is not a number).
    unsafe { sys::napi_get_value_uint32(env, value, &mut result) };
    result
}

unsafe fn double(env: sys::napi_env, value: sys::napi_value) -> f64 {
    let mut result = 0.0;
    // SAFETY: the callers pass their own callback's `env` and argument; `result` is a local (left
    // at 0 when the value is not a number).
    unsafe { sys::napi_get_value_double(env, value, &mut result) };
    result
}

unsafe fn boolean(env: sys::napi_env, value: sys::napi_value) -> bool {
    let mut result = false;
    // SAFETY: the callers pass their own callback's `env` and argument; `result` is a local (left
    // false when the value is not a boolean).
    unsafe { sys::napi_get_value_bool(env, value, &mut result) };
    result
}

unsafe fn bool_value(env: sys::napi_env, value: bool) -> sys::napi_value {
    let mut result = ptr::null_mut();
    // SAFETY: the callers pass their own callback's `env`; `result` is a local.
    unsafe { sys::napi_get_boolean(env, value, &mut result) };
    result
}

/// The acquire's own holder label, string `value` (the JS layer checked
/// its type), checked as [`crate::kind_request::label`] checks it.
///
/// # Safety
/// `env` and `value` are the current callback's.
unsafe fn read_label(env: sys::napi_env, value: sys::napi_value) -> Result<HolderLabel, LockError> {
    // SAFETY: as the caller promised.
    let units = unsafe { <Utf16String as FromNapiValue>::from_napi_value(env, value) }
        .map_err(|_| LockError::new(ErrorCode::InvalidArgument, "holder must be a string"))?;
    crate::kind_request::label(&units)
}
