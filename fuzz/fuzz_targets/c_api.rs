//! Random sequences of C API calls on one provider of local backends, as a C
//! program would make them: open from a fixed YAML, take backend handles
//! (several per backend), acquire (blocking with 0 or a small timeout, try,
//! asynchronous with cancel), with_lock, release, renew, the lease, error,
//! status and name getters, free every kind of handle, close and free the
//! provider, in whatever order the input says. Every call respects the
//! header's contracts (no freed handle is used again, out-parameters are
//! writable or NULL where NULL is allowed), so whatever goes wrong is the
//! library's: a crash, a leak (LeakSanitizer), a status the header does not
//! document for that call, `DOKEBI_LOCK_PANIC`, or a broken lock rule, which
//! a model of the provider checks:
//! - two leases of one backend and key are never valid at once;
//! - a lease is valid exactly until it is released or the provider closes;
//! - fences of one backend and key never repeat, and grow while no
//!   asynchronous acquire is in flight;
//! - with nothing in flight, an acquire is granted exactly when the key is
//!   free and fewer than `maxKeys` keys are held, and the backend's status
//!   counts what is held;
//! - the asynchronous callback comes exactly once for each accepted acquire;
//! - a failed call leaves its out-parameter untouched, and its error handle
//!   carries the same status.
#![no_main]

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use lock::backend::*;
use lock::error::*;
use lock::lease::*;
use lock::pending::*;
use lock::provider::*;
use lock::section::*;
use lock::status::dokebi_lock_status;

/// The fixed configuration: three local backends with small limits, so that
/// short sequences reach KEY_LIMIT, QUEUE_FULL, WAIT_TIMEOUT and LOCK_BUSY.
const YAML: &str = "schemaVersion: 1
options:
  dokebi-lock:
    backends:
      a:
        maxKeys: 3
        maxWaiters: 2
        waitTimeoutMs: 1
        maxKeyBytes: 16
      b:
        driver: local
        waitTimeoutMs: 0
        maxWaiters: 0
      c: { waitTimeoutMs: 2, maxKeys: 2 }
";

/// Per backend: name, maxKeys, maxKeyBytes.
const BACKENDS: [(&str, usize, usize); 3] = [("a", 3, 16), ("b", 10_000, 1024), ("c", 2, 1024)];

/// Names asked of `dokebi_lock_provider_backend`: the three, then unknown ones.
const LOOKUPS: [&[u8]; 6] = [b"a\0", b"b\0", b"c\0", b"nope\0", b"\0", b"\xff\xfe\0"];

/// Configurations `dokebi_lock_provider_open` must refuse, with issues.
const BAD_YAML: [&[u8]; 5] = [
    b"schemaVersion: 2\n",
    b"schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      a: {maxKeys: 0, maxKeys: 1}\n",
    b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    b"schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      r: {driver: redis, connection: none}\n",
    b"\xff\xfe not UTF-8",
];

/// Keys: a few fixed ones (shared, so that calls collide) or any bytes.
const KEYS: [&[u8]; 8] = [
    b"k1",
    b"k2",
    b"order:42",
    b"k3",
    b"",
    b"a\0b",
    b"\xed\xa0\x80", // a surrogate in UTF-8: invalid
    b"seventeen-bytes!!",
];

#[derive(Arbitrary, Debug)]
enum Key {
    Fixed(u8),
    Bytes(Vec<u8>),
}

impl Key {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Key::Fixed(i) => KEYS[usize::from(*i) % KEYS.len()].to_vec(),
            Key::Bytes(bytes) => bytes.clone(),
        }
    }
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Wait {
    Zero,
    Default,
    Ms(u8),
    Negative(u8),
}

impl Wait {
    fn ms(self) -> i64 {
        match self {
            Wait::Zero => 0,
            Wait::Default => -1,
            Wait::Ms(n) => i64::from(n % 3),
            // -2 ... -257, or i64::MIN: INVALID_ARGUMENT.
            Wait::Negative(255) => i64::MIN,
            Wait::Negative(n) => -2 - i64::from(n),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Backend { name: u8, want_error: bool },
    FreeBackend { which: u8 },
    Acquire { backend: u8, key: Key, wait: Wait, want_error: bool },
    TryAcquire { backend: u8, key: Key, want_error: bool },
    AcquireAsync { backend: u8, key: Key, wait: Wait, want_pending: bool, want_error: bool },
    Cancel { which: u8 },
    FreePending { which: u8 },
    Settle,
    WithLock { backend: u8, key: Key, wait: Wait, result: i32, nested: bool },
    Release { lease: u8, want_out: bool, want_error: bool },
    Renew { lease: u8, want_out: bool, want_error: bool },
    Getters { lease: u8 },
    FreeLease { lease: u8 },
    ErrorGetters { error: u8, issue: u8 },
    FreeError { error: u8 },
    Status { backend: u8 },
    Names { index: u8 },
    OpenBad { which: u8 },
    Nulls { which: u8 },
    Close,
    FreeProvider,
}

// --- The asynchronous callback: deliveries go to a queue the harness drains.

struct Delivery {
    tag: usize,
    status: u32,
    lease: usize,
    error: usize,
}

static DELIVERIES: Mutex<Vec<Delivery>> = Mutex::new(Vec::new());

unsafe extern "C" fn on_acquired(userdata: *mut c_void, status: dokebi_lock_status, lease: *mut dokebi_lock_lease, error: *mut dokebi_lock_error) {
    let delivery = Delivery { tag: userdata as usize, status: status as u32, lease: lease as usize, error: error as usize };
    DELIVERIES.lock().unwrap_or_else(|e| e.into_inner()).push(delivery);
}

// --- Status helpers.

use dokebi_lock_status::*;

fn code(status: dokebi_lock_status) -> u32 {
    status as u32
}

fn name_of(status: u32) -> &'static str {
    // A static string, never freed.
    let name: &'static CStr = unsafe { CStr::from_ptr(lock::status::dokebi_lock_status_name(status)) };
    name.to_str().expect("status names are ASCII")
}

fn expect_in(what: &str, status: u32, allowed: &[dokebi_lock_status]) {
    assert_ne!(status, code(DOKEBI_LOCK_PANIC), "{what}: a panic was caught at the C boundary");
    assert!(
        allowed.iter().any(|s| code(*s) == status),
        "{what}: status {status} ({}) is not one the header documents for this call here (allowed: {:?})",
        name_of(status),
        allowed
    );
}

fn fence_of(lease: *const dokebi_lock_lease) -> u64 {
    let text = unsafe { dokebi_lock_lease_fence(lease) };
    assert!(!text.is_null(), "a live lease has a fence");
    unsafe { CStr::from_ptr(text) }.to_str().expect("the fence is ASCII").parse().expect("the fence is a decimal u64")
}

fn c_fence(text: *const c_char) -> u64 {
    assert!(!text.is_null());
    unsafe { CStr::from_ptr(text) }.to_str().unwrap().parse().unwrap()
}

// --- The model.

struct LeaseRec {
    ptr: *mut dokebi_lock_lease,
    backend: usize,
    key: Vec<u8>,
    released: bool,
}

struct AsyncReq {
    backend: usize,
    key: Vec<u8>,
}

struct Harness {
    provider: *mut dokebi_lock_provider,
    closed: bool,
    backends: Vec<(*mut dokebi_lock_backend, usize)>,
    leases: Vec<LeaseRec>,
    errors: Vec<*mut dokebi_lock_error>,
    pendings: Vec<*mut dokebi_lock_pending>,
    /// Accepted asynchronous acquires whose callback has not come yet.
    in_flight: HashMap<usize, AsyncReq>,
    next_tag: usize,
    /// Every fence seen per backend and key, and the largest.
    fences: BTreeMap<(usize, Vec<u8>), Vec<u64>>,
}

fn pick<T>(items: &[T], which: u8) -> Option<usize> {
    (!items.is_empty()).then(|| usize::from(which) % items.len())
}

impl Harness {
    fn open() -> Harness {
        let mut provider = ptr::null_mut();
        let mut error = ptr::null_mut();
        let status = unsafe { dokebi_lock_provider_open(YAML.as_ptr().cast(), YAML.len(), &mut provider, &mut error) };
        assert_eq!(status, DOKEBI_LOCK_OK, "the fixed YAML opens");
        assert!(error.is_null() && !provider.is_null());
        Harness {
            provider,
            closed: false,
            backends: Vec::new(),
            leases: Vec::new(),
            errors: Vec::new(),
            pendings: Vec::new(),
            in_flight: HashMap::new(),
            next_tag: 1,
            fences: BTreeMap::new(),
        }
    }

    /// Checks the error a failed call wrote, and keeps it for the getters.
    fn took_error(&mut self, what: &str, status: u32, error: *mut dokebi_lock_error, wanted: bool) {
        if status == code(DOKEBI_LOCK_OK) {
            assert!(error.is_null(), "{what}: an error handle was written on success");
            return;
        }
        if !wanted {
            return;
        }
        assert!(!error.is_null(), "{what}: failed with {} but wrote no error handle", name_of(status));
        let error_code = unsafe { dokebi_lock_error_code(error) } as u32;
        assert_eq!(error_code, status, "{what}: the error's code differs from the status");
        let name = unsafe { CStr::from_ptr(dokebi_lock_error_name(error)) }.to_str().unwrap();
        assert_eq!(name, name_of(status));
        self.errors.push(error);
    }

    /// Keys held now per the model: valid leases of `backend`.
    fn held(&self, backend: usize) -> Vec<&[u8]> {
        let mut keys: Vec<&[u8]> =
            self.leases.iter().filter(|l| l.backend == backend && !l.released && !self.closed).map(|l| l.key.as_slice()).collect();
        keys.sort();
        keys.dedup();
        keys
    }

    fn in_flight_on(&self, backend: usize) -> bool {
        self.in_flight.values().any(|r| r.backend == backend)
    }

    /// A fence handed out for `key` of `backend` (by an acquire or a
    /// section) is new; when no other acquire of the backend was in flight
    /// (`ordered`), it is also above every earlier one.
    fn record_fence(&mut self, what: &str, backend: usize, key: &[u8], fence: u64, ordered: bool) {
        let seen = self.fences.entry((backend, key.to_vec())).or_default();
        assert!(!seen.contains(&fence), "{what}: fence {fence} was handed out before for this key");
        if ordered {
            if let Some(max) = seen.iter().max() {
                assert!(fence > *max, "{what}: fence {fence} is not above the earlier {max}");
            }
        }
        seen.push(fence);
    }

    /// A new lease was granted: it is valid, its key is the one asked, no
    /// other lease of the key is valid, and its fence is new.
    fn granted(&mut self, what: &str, lease: *mut dokebi_lock_lease, backend: usize, key: &[u8], ordered: bool) {
        assert!(!lease.is_null(), "{what}: OK without a lease");
        let mut len = usize::MAX;
        let got = unsafe { dokebi_lock_lease_key(lease, &mut len) };
        assert!(!got.is_null());
        assert_eq!(unsafe { std::slice::from_raw_parts(got.cast::<u8>(), len) }, key, "{what}: the lease's key differs");
        let valid = unsafe { dokebi_lock_lease_valid(lease) };
        if !self.closed {
            assert!(valid, "{what}: a new lease is not valid");
        }
        if valid {
            for other in &self.leases {
                if other.backend == backend && other.key == key {
                    assert!(!unsafe { dokebi_lock_lease_valid(other.ptr) }, "{what}: two leases of one key are valid at once");
                }
            }
        }
        self.record_fence(what, backend, key, fence_of(lease), ordered);
        // A lease delivered after close is not valid: model it as released.
        self.leases.push(LeaseRec { ptr: lease, backend, key: key.to_vec(), released: !valid });
    }

    /// Takes the callbacks that came: each exactly once, each as documented.
    fn drain(&mut self) {
        let deliveries = std::mem::take(&mut *DELIVERIES.lock().unwrap());
        for delivery in deliveries {
            let request = self.in_flight.remove(&delivery.tag).expect("a callback for an acquire that was not accepted, or a second one");
            let (lease, error) = (delivery.lease as *mut dokebi_lock_lease, delivery.error as *mut dokebi_lock_error);
            let status = delivery.status;
            expect_in(
                "async callback",
                status,
                &[
                    DOKEBI_LOCK_OK,
                    DOKEBI_LOCK_INVALID_KEY,
                    DOKEBI_LOCK_LOCK_BUSY,
                    DOKEBI_LOCK_WAIT_TIMEOUT,
                    DOKEBI_LOCK_KEY_LIMIT,
                    DOKEBI_LOCK_QUEUE_FULL,
                    DOKEBI_LOCK_ABORTED,
                    DOKEBI_LOCK_CLOSED,
                ],
            );
            if status == code(DOKEBI_LOCK_OK) {
                assert!(error.is_null(), "async callback: OK with an error");
                self.granted("async callback", lease, request.backend, &request.key, false);
            } else {
                assert!(lease.is_null(), "async callback: a failure with a lease");
                assert!(!error.is_null(), "async callback: a failure without an error");
                assert_eq!(unsafe { dokebi_lock_error_code(error) } as u32, status);
                self.errors.push(error);
            }
        }
    }

    /// Waits for every accepted asynchronous acquire's callback (waits are
    /// at most a few ms, so this is quick unless a callback never comes).
    fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            self.drain();
            if self.in_flight.is_empty() {
                return;
            }
            assert!(Instant::now() < deadline, "{} asynchronous acquire(s) never called back", self.in_flight.len());
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn backend(&self, which: u8) -> Option<(*mut dokebi_lock_backend, usize)> {
        pick(&self.backends, which).map(|i| self.backends[i])
    }

    /// What an acquire of `key` on `backend` must answer, when the model
    /// knows: `Some(allowed)`; the caller checks membership.
    fn expected(&self, backend: usize, key: &[u8], wait_ms: i64, nothing_waits: bool) -> Vec<dokebi_lock_status> {
        let (_, max_keys, max_key_bytes) = BACKENDS[backend];
        let utf8 = std::str::from_utf8(key).ok().filter(|k| !k.is_empty() && !k.contains('\0'));
        let Some(text) = utf8 else { return vec![DOKEBI_LOCK_INVALID_KEY] };
        if wait_ms < -1 {
            return vec![DOKEBI_LOCK_INVALID_ARGUMENT];
        }
        if self.closed {
            return if text.len() > max_key_bytes {
                vec![DOKEBI_LOCK_INVALID_KEY, DOKEBI_LOCK_CLOSED]
            } else {
                vec![DOKEBI_LOCK_CLOSED]
            };
        }
        if text.len() > max_key_bytes {
            return vec![DOKEBI_LOCK_INVALID_KEY];
        }
        let held = self.held(backend);
        if held.contains(&key) {
            return vec![DOKEBI_LOCK_LOCK_BUSY, DOKEBI_LOCK_WAIT_TIMEOUT, DOKEBI_LOCK_QUEUE_FULL];
        }
        if self.in_flight_on(backend) || !nothing_waits {
            // An asynchronous acquire may hold or wait for any key.
            return vec![
                DOKEBI_LOCK_OK,
                DOKEBI_LOCK_LOCK_BUSY,
                DOKEBI_LOCK_WAIT_TIMEOUT,
                DOKEBI_LOCK_QUEUE_FULL,
                DOKEBI_LOCK_KEY_LIMIT,
            ];
        }
        if held.len() >= max_keys {
            vec![DOKEBI_LOCK_KEY_LIMIT]
        } else {
            vec![DOKEBI_LOCK_OK]
        }
    }

    fn lease(&self, which: u8) -> Option<usize> {
        pick(&self.leases, which)
    }

    fn step(&mut self, op: Op) {
        self.drain();
        match op {
            Op::Backend { name, want_error } => {
                if self.provider.is_null() {
                    return;
                }
                let index = usize::from(name) % LOOKUPS.len();
                let mut out = ptr::null_mut();
                let mut error = ptr::null_mut();
                let error_arg = if want_error { &mut error as *mut _ } else { ptr::null_mut() };
                let status =
                    unsafe { dokebi_lock_provider_backend(self.provider, LOOKUPS[index].as_ptr().cast(), &mut out, error_arg) } as u32;
                let allowed: &[_] = match (index < BACKENDS.len(), self.closed) {
                    (true, false) => &[DOKEBI_LOCK_OK],
                    (true, true) => &[DOKEBI_LOCK_CLOSED],
                    (false, false) => &[DOKEBI_LOCK_UNKNOWN_BACKEND],
                    (false, true) => &[DOKEBI_LOCK_UNKNOWN_BACKEND, DOKEBI_LOCK_CLOSED],
                };
                expect_in("provider_backend", status, allowed);
                self.took_error("provider_backend", status, error, want_error);
                if status == code(DOKEBI_LOCK_OK) {
                    assert!(!out.is_null());
                    self.backends.push((out, index));
                } else {
                    assert!(out.is_null(), "provider_backend: failed but wrote its out-parameter");
                }
            }
            Op::FreeBackend { which } => {
                if let Some(i) = pick(&self.backends, which) {
                    let (backend, _) = self.backends.swap_remove(i);
                    unsafe { dokebi_lock_backend_free(backend) };
                }
            }
            Op::Acquire { backend, key, wait, want_error } => self.acquire(backend, &key.bytes(), Some(wait.ms()), want_error),
            Op::TryAcquire { backend, key, want_error } => self.acquire(backend, &key.bytes(), None, want_error),
            Op::AcquireAsync { backend, key, wait, want_pending, want_error } => {
                let Some((handle, index)) = self.backend(backend) else { return };
                let key = key.bytes();
                let tag = self.next_tag;
                self.next_tag += 1;
                let mut pending: *mut dokebi_lock_pending = ptr::null_mut();
                let mut error = ptr::null_mut();
                let pending_arg = if want_pending { &mut pending as *mut _ } else { ptr::null_mut() };
                let error_arg = if want_error { &mut error as *mut _ } else { ptr::null_mut() };
                // Registered before the call: the callback may come before it returns.
                self.in_flight.insert(tag, AsyncReq { backend: index, key: key.clone() });
                let status = unsafe {
                    dokebi_lock_acquire_async(
                        handle,
                        key.as_ptr().cast(),
                        key.len(),
                        wait.ms(),
                        Some(on_acquired),
                        tag as *mut c_void,
                        pending_arg,
                        error_arg,
                    )
                } as u32;
                let valid_key = std::str::from_utf8(&key).is_ok_and(|k| !k.is_empty() && !k.contains('\0'));
                let allowed: &[_] = if !valid_key {
                    &[DOKEBI_LOCK_INVALID_KEY]
                } else if wait.ms() < -1 {
                    &[DOKEBI_LOCK_INVALID_ARGUMENT]
                } else if self.closed {
                    &[DOKEBI_LOCK_OK, DOKEBI_LOCK_CLOSED]
                } else {
                    &[DOKEBI_LOCK_OK]
                };
                expect_in("acquire_async", status, allowed);
                self.took_error("acquire_async", status, error, want_error);
                if status == code(DOKEBI_LOCK_OK) {
                    if want_pending {
                        assert!(!pending.is_null());
                        self.pendings.push(pending);
                    }
                } else {
                    assert!(pending.is_null(), "acquire_async: failed but wrote its out-parameter");
                    // Never called back: no longer in flight. A callback for
                    // it would fail the drain.
                    self.in_flight.remove(&tag);
                }
            }
            Op::Cancel { which } => {
                if let Some(i) = pick(&self.pendings, which) {
                    let status = unsafe { dokebi_lock_pending_cancel(self.pendings[i]) } as u32;
                    expect_in("pending_cancel", status, &[DOKEBI_LOCK_OK]);
                }
            }
            Op::FreePending { which } => {
                if let Some(i) = pick(&self.pendings, which) {
                    unsafe { dokebi_lock_pending_free(self.pendings.swap_remove(i)) };
                }
            }
            Op::Settle => self.settle(),
            Op::WithLock { backend, key, wait, result, nested } => self.with_lock(backend, &key.bytes(), wait.ms(), result, nested),
            Op::Release { lease, want_out, want_error } => {
                let Some(i) = self.lease(lease) else { return };
                let mut released = !self.leases[i].released; // the opposite of the answer
                let sentinel = released;
                let mut error = ptr::null_mut();
                let out_arg = if want_out { &mut released as *mut bool } else { ptr::null_mut() };
                let error_arg = if want_error { &mut error as *mut _ } else { ptr::null_mut() };
                let status = unsafe { dokebi_lock_lease_release(self.leases[i].ptr, out_arg, error_arg) } as u32;
                expect_in("lease_release", status, &[DOKEBI_LOCK_OK, DOKEBI_LOCK_CLOSED]);
                self.took_error("lease_release", status, error, want_error);
                let was_valid = !self.leases[i].released && !self.closed;
                if status == code(DOKEBI_LOCK_OK) {
                    if want_out {
                        assert_eq!(released, was_valid, "lease_release: released={released}, but the lease was valid={was_valid}");
                    }
                    self.leases[i].released = true;
                } else {
                    assert!(self.closed, "lease_release failed on an open provider");
                    assert_eq!(released, sentinel, "lease_release: failed but wrote its out-parameter");
                }
                assert!(!unsafe { dokebi_lock_lease_valid(self.leases[i].ptr) }, "a released lease is still valid");
            }
            Op::Renew { lease, want_out, want_error } => {
                let Some(i) = self.lease(lease) else { return };
                let model = !self.leases[i].released && !self.closed;
                let mut valid = !model;
                let mut error = ptr::null_mut();
                let out_arg = if want_out { &mut valid as *mut bool } else { ptr::null_mut() };
                let error_arg = if want_error { &mut error as *mut _ } else { ptr::null_mut() };
                let status = unsafe { dokebi_lock_lease_renew(self.leases[i].ptr, out_arg, error_arg) } as u32;
                expect_in("lease_renew", status, &[DOKEBI_LOCK_OK, DOKEBI_LOCK_CLOSED]);
                self.took_error("lease_renew", status, error, want_error);
                if status == code(DOKEBI_LOCK_OK) && want_out {
                    assert_eq!(valid, model, "lease_renew: valid={valid}, the model says {model}");
                }
                if status != code(DOKEBI_LOCK_OK) {
                    assert!(self.closed, "lease_renew failed on an open provider");
                    assert_eq!(valid, !model, "lease_renew: failed but wrote its out-parameter");
                }
            }
            Op::Getters { lease } => {
                let Some(i) = self.lease(lease) else { return };
                let rec = &self.leases[i];
                let model = !rec.released && !self.closed;
                let valid = unsafe { dokebi_lock_lease_valid(rec.ptr) };
                assert_eq!(valid, model, "lease_valid: {valid}, the model says {model}");
                let remaining = unsafe { dokebi_lock_lease_remaining_ms(rec.ptr) };
                assert_eq!(remaining, if valid { DOKEBI_LOCK_NEVER_EXPIRES } else { 0 }, "lease_remaining_ms");
                let mut len = 0;
                let key = unsafe { dokebi_lock_lease_key(rec.ptr, &mut len) };
                assert_eq!(unsafe { std::slice::from_raw_parts(key.cast::<u8>(), len) }, rec.key.as_slice());
                assert!(unsafe { dokebi_lock_lease_key(rec.ptr, ptr::null_mut()) }.is_null());
                fence_of(rec.ptr);
            }
            Op::FreeLease { lease } => {
                if let Some(i) = self.lease(lease) {
                    let rec = self.leases.swap_remove(i);
                    unsafe { dokebi_lock_lease_free(rec.ptr) };
                }
            }
            Op::ErrorGetters { error, issue } => {
                let Some(i) = pick(&self.errors, error) else { return };
                let e = self.errors[i];
                unsafe {
                    assert!(!dokebi_lock_error_message(e).is_null());
                    assert!(!dokebi_lock_error_fix(e).is_null());
                    let cause = dokebi_lock_error_cause(e);
                    if !cause.is_null() {
                        let _ = CStr::from_ptr(cause).to_bytes();
                    }
                    let count = dokebi_lock_error_issue_count(e);
                    if dokebi_lock_error_code(e) != DOKEBI_LOCK_INVALID_OPTIONS {
                        assert_eq!(count, 0, "only INVALID_OPTIONS lists issues");
                    }
                    let index = usize::from(issue);
                    let (path, message) = (dokebi_lock_error_issue_path(e, index), dokebi_lock_error_issue_message(e, index));
                    assert_eq!(path.is_null(), index >= count);
                    assert_eq!(message.is_null(), index >= count);
                    if !message.is_null() {
                        let _ = CStr::from_ptr(path).to_bytes();
                        let _ = CStr::from_ptr(message).to_bytes();
                    }
                }
            }
            Op::FreeError { error } => {
                if let Some(i) = pick(&self.errors, error) {
                    unsafe { dokebi_lock_error_free(self.errors.swap_remove(i)) };
                }
            }
            Op::Status { backend } => {
                let Some((handle, index)) = self.backend(backend) else { return };
                let mut status = dokebi_lock_backend_status {
                    held: 7777,
                    waiting: 7777,
                    acquired: 7777,
                    timed_out: 7777,
                    lost: 7777,
                    is_redis: true,
                    connected: true,
                    subscribed: true,
                    last_error: 7777,
                    last_probe_unix_ms: 7777,
                };
                let mut error = ptr::null_mut();
                let result = unsafe { dokebi_lock_backend_get_status(handle, &mut status, &mut error) } as u32;
                expect_in("backend_get_status", result, &[DOKEBI_LOCK_OK, DOKEBI_LOCK_CLOSED]);
                self.took_error("backend_get_status", result, error, true);
                if result == code(DOKEBI_LOCK_OK) {
                    assert!(!status.is_redis && !status.connected && !status.subscribed);
                    assert_eq!(status.lost, 0);
                    assert_eq!(status.last_error, 0);
                    assert_eq!(status.last_probe_unix_ms, -1);
                    if !self.closed && !self.in_flight_on(index) {
                        assert_eq!(status.held as usize, self.held(index).len(), "backend status: held");
                        assert_eq!(status.waiting, 0, "backend status: waiting with no acquire in flight");
                    }
                } else {
                    assert!(self.closed, "backend_get_status failed on an open provider");
                }
            }
            Op::Names { index } => {
                if self.provider.is_null() {
                    return;
                }
                assert_eq!(unsafe { dokebi_lock_provider_name_count(self.provider) }, BACKENDS.len());
                let index = usize::from(index % 5);
                let name = unsafe { dokebi_lock_provider_name(self.provider, index) };
                match BACKENDS.get(index) {
                    Some((expected, _, _)) => assert_eq!(unsafe { CStr::from_ptr(name) }.to_str().unwrap(), *expected),
                    None => assert!(name.is_null()),
                }
            }
            Op::OpenBad { which } => {
                let yaml = BAD_YAML[usize::from(which) % BAD_YAML.len()];
                let mut provider = ptr::null_mut();
                let mut error = ptr::null_mut();
                let status = unsafe { dokebi_lock_provider_open(yaml.as_ptr().cast(), yaml.len(), &mut provider, &mut error) } as u32;
                expect_in("provider_open", status, &[DOKEBI_LOCK_INVALID_OPTIONS, DOKEBI_LOCK_UNKNOWN_CONNECTION]);
                assert!(provider.is_null());
                self.took_error("provider_open", status, error, true);
                assert!(unsafe { dokebi_lock_error_issue_count(error) } > 0, "an options error lists its issues");
            }
            Op::Nulls { which } => self.nulls(which),
            Op::Close => {
                if self.provider.is_null() {
                    return;
                }
                let status = unsafe { dokebi_lock_provider_close(self.provider) } as u32;
                expect_in("provider_close", status, &[DOKEBI_LOCK_OK]);
                self.closed = true;
                self.after_close();
            }
            Op::FreeProvider => {
                if self.provider.is_null() {
                    return;
                }
                unsafe { dokebi_lock_provider_free(self.provider) };
                self.provider = ptr::null_mut();
                self.closed = true;
                self.after_close();
            }
        }
    }

    /// After close, every lease is invalid.
    fn after_close(&mut self) {
        for lease in &self.leases {
            assert!(!unsafe { dokebi_lock_lease_valid(lease.ptr) }, "a lease is valid after its provider closed");
        }
    }

    /// A blocking acquire (`wait` given) or a try-acquire (`None`).
    fn acquire(&mut self, backend: u8, key: &[u8], wait: Option<i64>, want_error: bool) {
        let Some((handle, index)) = self.backend(backend) else { return };
        let wait_ms = match wait {
            Some(-1) => [1, 0, 2][index],
            Some(ms) => ms,
            None => 0,
        };
        let allowed = self.expected(index, key, wait_ms, true);
        let sentinel = 0x1usize as *mut dokebi_lock_lease;
        let mut lease = sentinel;
        let mut error = ptr::null_mut();
        let error_arg = if want_error { &mut error as *mut _ } else { ptr::null_mut() };
        let (what, status) = match wait {
            Some(ms) => ("acquire", unsafe { dokebi_lock_acquire(handle, key.as_ptr().cast(), key.len(), ms, &mut lease, error_arg) }),
            None => ("try_acquire", unsafe { dokebi_lock_try_acquire(handle, key.as_ptr().cast(), key.len(), &mut lease, error_arg) }),
        };
        let status = status as u32;
        expect_in(what, status, &allowed);
        if wait_ms == 0 && status == code(DOKEBI_LOCK_WAIT_TIMEOUT) {
            panic!("{what}: WAIT_TIMEOUT with a wait of 0 (the header says LOCK_BUSY)");
        }
        self.took_error(what, status, error, want_error);
        if status == code(DOKEBI_LOCK_OK) {
            let ordered = !self.in_flight_on(index);
            self.granted(what, lease, index, key, ordered);
        } else {
            assert_eq!(lease, sentinel, "{what}: failed but wrote its out-parameter");
        }
    }

    fn with_lock(&mut self, backend: u8, key: &[u8], wait: i64, result: i32, nested: bool) {
        let Some((handle, index)) = self.backend(backend) else { return };
        let wait_ms = if wait == -1 { [1, 0, 2][index] } else { wait };
        let allowed = self.expected(index, key, wait_ms, true);
        let mut section = SectionCall { backend: handle, key: key.to_vec(), result, nested, fence: None, nested_status: None };
        let mut out = -12345;
        let mut error = ptr::null_mut();
        let status = unsafe {
            dokebi_lock_with_lock(
                handle,
                key.as_ptr().cast(),
                key.len(),
                wait,
                Some(run_section),
                (&mut section as *mut SectionCall).cast(),
                &mut out,
                &mut error,
            )
        } as u32;
        expect_in("with_lock", status, &allowed);
        self.took_error("with_lock", status, error, true);
        if status == code(DOKEBI_LOCK_OK) {
            assert_eq!(out, result, "with_lock: out_result is not the section's return value");
            let fence = section.fence.expect("with_lock: OK but the section did not run");
            let ordered = !self.in_flight_on(index);
            self.record_fence("with_lock", index, key, fence, ordered);
            if nested {
                expect_in("try_acquire inside a section", section.nested_status.unwrap(), &[DOKEBI_LOCK_LOCK_BUSY]);
            }
            // The section's lease is released when with_lock returns.
            if !self.in_flight_on(index) && !self.held(index).contains(&key) {
                let mut lease = ptr::null_mut();
                let again = unsafe { dokebi_lock_try_acquire(handle, key.as_ptr().cast(), key.len(), &mut lease, ptr::null_mut()) } as u32;
                if again == code(DOKEBI_LOCK_OK) {
                    unsafe { dokebi_lock_lease_free(lease) };
                }
                let allowed = if self.held(index).len() < BACKENDS[index].1 { DOKEBI_LOCK_OK } else { DOKEBI_LOCK_KEY_LIMIT };
                expect_in("try_acquire after with_lock", again, &[allowed]);
            }
        } else {
            assert_eq!(out, -12345, "with_lock: failed but wrote out_result");
            assert!(section.fence.is_none(), "with_lock: failed but the section ran");
        }
    }

    /// NULL handles and out-parameters: INVALID_ARGUMENT, or NULL/0/false
    /// from getters, and every _free takes NULL.
    fn nulls(&mut self, which: u8) {
        let mut lease = ptr::null_mut();
        let mut error = ptr::null_mut();
        let backend = self.backend(0).map_or(ptr::null_mut(), |(b, _)| b);
        let status = unsafe {
            match which % 12 {
                0 => dokebi_lock_acquire(ptr::null(), b"k".as_ptr().cast(), 1, 0, &mut lease, &mut error),
                1 if !backend.is_null() => dokebi_lock_acquire(backend, b"k".as_ptr().cast(), 1, 0, ptr::null_mut(), &mut error),
                2 if !backend.is_null() => dokebi_lock_try_acquire(backend, ptr::null(), 3, &mut lease, &mut error),
                3 => dokebi_lock_lease_release(ptr::null(), ptr::null_mut(), &mut error),
                4 => dokebi_lock_lease_renew(ptr::null(), ptr::null_mut(), &mut error),
                5 if !self.provider.is_null() => {
                    let mut out = ptr::null_mut();
                    dokebi_lock_provider_backend(self.provider, ptr::null(), &mut out, &mut error)
                }
                6 => dokebi_lock_provider_open(YAML.as_ptr().cast(), YAML.len(), ptr::null_mut(), &mut error),
                7 if !backend.is_null() => {
                    dokebi_lock_acquire_async(backend, b"k".as_ptr().cast(), 1, 0, None, ptr::null_mut(), ptr::null_mut(), &mut error)
                }
                8 if !backend.is_null() => {
                    let mut out = 0;
                    dokebi_lock_with_lock(backend, b"k".as_ptr().cast(), 1, 0, None, ptr::null_mut(), &mut out, &mut error)
                }
                9 => dokebi_lock_backend_get_status(ptr::null(), ptr::null_mut(), &mut error),
                10 => dokebi_lock_pending_cancel(ptr::null()),
                _ => {
                    assert!(dokebi_lock_lease_fence(ptr::null()).is_null());
                    assert!(!dokebi_lock_lease_valid(ptr::null()));
                    assert_eq!(dokebi_lock_lease_remaining_ms(ptr::null()), 0);
                    assert!(dokebi_lock_error_name(ptr::null()).is_null());
                    assert_eq!(dokebi_lock_error_code(ptr::null()), DOKEBI_LOCK_OK);
                    assert_eq!(dokebi_lock_error_issue_count(ptr::null()), 0);
                    assert_eq!(dokebi_lock_provider_name_count(ptr::null()), 0);
                    assert_eq!(dokebi_lock_provider_close(ptr::null_mut()), DOKEBI_LOCK_INVALID_ARGUMENT);
                    dokebi_lock_lease_free(ptr::null_mut());
                    dokebi_lock_backend_free(ptr::null_mut());
                    dokebi_lock_error_free(ptr::null_mut());
                    dokebi_lock_pending_free(ptr::null_mut());
                    dokebi_lock_provider_free(ptr::null_mut());
                    return;
                }
            }
        } as u32;
        assert!(lease.is_null(), "a NULL argument still wrote a lease");
        expect_in("NULL argument", status, &[DOKEBI_LOCK_INVALID_ARGUMENT]);
        let wanted = which % 12 != 10;
        self.took_error("NULL argument", status, error, wanted);
    }

    /// Ends the input: close the provider, wait for every callback, and free
    /// every handle (LeakSanitizer then finds whatever the library kept).
    fn finish(mut self) {
        if !self.provider.is_null() {
            unsafe { dokebi_lock_provider_free(self.provider) };
            self.provider = ptr::null_mut();
            self.closed = true;
            self.after_close();
        }
        self.settle();
        for lease in self.leases.drain(..) {
            unsafe { dokebi_lock_lease_free(lease.ptr) };
        }
        for error in self.errors.drain(..) {
            unsafe { dokebi_lock_error_free(error) };
        }
        for pending in self.pendings.drain(..) {
            unsafe { dokebi_lock_pending_free(pending) };
        }
        for (backend, _) in self.backends.drain(..) {
            unsafe { dokebi_lock_backend_free(backend) };
        }
    }
}

struct SectionCall {
    backend: *const dokebi_lock_backend,
    key: Vec<u8>,
    result: i32,
    nested: bool,
    fence: Option<u64>,
    nested_status: Option<u32>,
}

unsafe extern "C" fn run_section(section: *const dokebi_lock_section, user_data: *mut c_void) -> c_int {
    let call = unsafe { &mut *user_data.cast::<SectionCall>() };
    assert!(call.fence.is_none(), "the section ran twice");
    call.fence = Some(c_fence(unsafe { dokebi_lock_section_fence(section) }));
    assert!(!unsafe { dokebi_lock_section_lost(section) }, "a local section's lease is lost");
    if call.nested {
        let mut lease = ptr::null_mut();
        let status =
            unsafe { dokebi_lock_try_acquire(call.backend, call.key.as_ptr().cast(), call.key.len(), &mut lease, ptr::null_mut()) };
        if status == DOKEBI_LOCK_OK {
            unsafe { dokebi_lock_lease_free(lease) };
        }
        call.nested_status = Some(status as u32);
    }
    call.result
}

fuzz_target!(|ops: Vec<Op>| {
    let mut harness = Harness::open();
    // Most inputs start with a handle on each backend.
    for name in 0..BACKENDS.len() as u8 {
        harness.step(Op::Backend { name, want_error: true });
    }
    for op in ops {
        harness.step(op);
    }
    harness.finish();
});
