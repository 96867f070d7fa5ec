//! The numbers the local engine ([`crate::local`]) and `npm/lib/local.js`
//! exchange through the out-array ([`crate::out`]): result codes, the flags
//! of `acquireKind`, and which cells hold what. Written here once; the
//! build (`build.rs`) writes them as `npm/lib/protocol.js`, which the JS
//! layer imports, and `scripts/test-node` fails when the committed copy
//! differs.

/// Declares each constant and lists it in [`ALL`], for `build.rs`.
macro_rules! protocol {
    ($($(#[doc = $doc:literal])+ $name:ident: $ty:ty = $value:expr;)+) => {
        $($(#[doc = $doc])+ pub const $name: $ty = $value;)+
        /// Every constant: its name, value and doc comment.
        #[allow(dead_code)] // read by build.rs only
        pub const ALL: &[(&str, f64, &str)] = &[$((stringify!($name), $name as f64, concat!($($doc, "\n"),+))),+];
    };
}

protocol! {
    /// `acquire`: the lease is held; `out = [GRANTED, slot, fence]`.
    GRANTED: f64 = 0.0;
    /// `acquire`: queued; `out = [QUEUED, waiterSlot, waiterSerial]`.
    QUEUED: f64 = 1.0;
    /// `acquire`: failed; the error waits in `takeError()`.
    FAILED: f64 = -1.0;
    /// `release`: the handle named no held lease.
    NOT_HELD: f64 = 0.0;
    /// `release`: released, the key is free.
    FREED: f64 = 1.0;
    /// `release`, `cancel`, `nextGrant`: a waiter was granted;
    /// `out = [HANDED_ON, leaseSlot, leaseFence, waiterSlot]`.
    HANDED_ON: f64 = 2.0;
    /// As HANDED_ON, and more grants follow the ones reported: `nextGrant()`
    /// reports the next. (A shared lease, or units, can let in several waiters
    /// at once; a plain hand-off never does.)
    HANDED_ON_MORE: f64 = 3.0;
    /// Where JS writes the slot of a deferred release's lease.
    DEFERRED_SLOT: usize = 4;
    /// Where JS writes the fence of a deferred release's lease (0, which no
    /// lease has, when none is deferred).
    DEFERRED_FENCE: usize = 5;
    /// With HANDED_ON and HANDED_ON_MORE: how many grants follow the first in
    /// this call's report, each as `[leaseSlot, leaseFence, waiterSlot]` from
    /// `out[MORE_AT]` on.
    MORE_COUNT: usize = 6;
    /// The first cell of the grants that follow the first.
    MORE_AT: usize = 7;
    /// The most grants one call reports after its first.
    MORE_MAX: usize = 15;
    /// Cells of the out-array: a result code, up to three ids, a deferred
    /// release, and the grants after the first.
    OUT_LEN: usize = MORE_AT + 3 * MORE_MAX;
    /// `acquireKind`'s `out[0]` flag: the acquire may wait.
    MAY_WAIT: u32 = 1;
    /// `acquireKind`'s `out[0]` flag: several keys (the JS layer knows;
    /// asking Node-API cost a call).
    SEVERAL_KEYS: u32 = 2;
    /// `acquireKind`'s `out[0]` flag: the keys are its arguments rather than
    /// one array (one `napi_get_cb_info` reads them all, where an array costs
    /// a call per key).
    KEYS_AS_ARGUMENTS: u32 = 4;
    /// `acquireKind`'s `out[0]` flag: the acquire gives a holder label of
    /// its own, the argument after the keys (one key or an array: never
    /// with KEYS_AS_ARGUMENTS).
    LABELLED: u32 = 8;
    /// The most keys `acquireKind` takes as arguments (more come as an array).
    ARGUMENT_KEYS: usize = 8;
    /// The largest timer Node can arm (`setTimeout` clamps larger values to
    /// 1 ms): the bound of every `waitTimeoutMs`, as the core's options.
    MAX_TIMER_MS: u64 = 2_147_483_647;
}
