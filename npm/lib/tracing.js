// Tracing on node:diagnostics_channel tracing channels, for APMs: every
// acquire (`dokebi-lock:acquire`), every withLock (`dokebi-lock:with-lock`)
// and every lease's hold (`dokebi-lock:hold`), on every backend. The
// protocol is documented in README.md ("Tracing") and index.d.ts.
//
// Done here, in the JS layer, once for every backend: the built-in views
// (local.js, store.js) and the library's Proxy over an app's object
// (full-backend.js) each make one guarded call per path. Zero cost when
// nobody listens: a call site first asks acquireTraced() / withLockTraced(),
// which read the `hasSubscribers` of the channels' `start` only (a whole
// TracingChannel's reads all five of its channels'), and a release reads a
// counter of open holds; no context object, closure or
// clock read happens otherwise. So a subscriber subscribes to `start`, as
// `tracingChannel.subscribe({ start, ... })` with a start handler does.
//
// An acquire publishes as `tracingChannel.tracePromise` does (start, end,
// then error, asyncStart and asyncEnd when it settles; start runs the bound
// stores), but with no `result`: a lease carries its key, and a key is the
// app's data. The context object never holds a key, nor a label of one.
import { tracingChannel } from 'node:diagnostics_channel';
import { LockError } from './errors.js';

const acquireChannel = tracingChannel('dokebi-lock:acquire');
const withLockChannel = tracingChannel('dokebi-lock:with-lock');
const holdChannel = tracingChannel('dokebi-lock:hold');
const acquireStart = acquireChannel.start;
const withLockStart = withLockChannel.start;
const holdStart = holdChannel.start;

/** True when an acquire is to be traced: someone listens for acquires or holds. */
export function acquireTraced() {
  return acquireStart.hasSubscribers || holdStart.hasSubscribers;
}

/** True when a withLock is to be traced: its section, its acquire or its hold. */
export function withLockTraced() {
  return withLockStart.hasSubscribers || acquireStart.hasSubscribers || holdStart.hasSubscribers;
}

/**
 * How many holds started and did not end: a release looks its lease up
 * only while some are open, also after their subscriber left (so each ends).
 */
const open = { holds: 0 };

/** True while a hold is open: a release (or withLock) then calls holdEnded. */
export function holdsOpen() {
  return open.holds !== 0;
}

/** True when a withLock section should start the hold of an app driver's lease (sectionHolds). */
export function holdsWatched() {
  return holdStart.hasSubscribers;
}

/**
 * The traced acquire(key, options) and withLock(key, fn, options) of a
 * backend, over its untraced `acquire` and `withLock` (same signatures).
 * `source` names it: `{ backend, driver, seesReleases }`, the last true when
 * the library sees its leases' releases (the built-in drivers; an app's
 * leases are its own objects, seen only inside the library's withLock).
 * Built once per backend, so that the backend's own methods create no
 * closure: V8 would allocate a context for the captured arguments on every
 * call, traced or not.
 */
export function tracedCalls(source, acquire, withLock) {
  return {
    acquire: (key, options) => traceAcquire(source, key, options, () => acquire(key, options)),
    withLock: (key, fn, options) => traceWithLock(source, key, fn, options, (section) => withLock(key, section, options)),
  };
}

/**
 * tracedCalls of a local backend over `core` (local.js): its withLock runs
 * `releasedAtOnce` (with-lock.js) over the traced acquire.
 */
export function tracedLocal(name, core, releasedAtOnce) {
  const takes = {
    take: (key, options) => calls.acquire(key, options),
    releaseNow: (lease) => core.releaseNow(lease),
    closing: core.closing,
  };
  const calls = tracedCalls(
    { backend: name, driver: 'local', seesReleases: true },
    (key, options) => core.acquire(key, options),
    (key, fn, options) => releasedAtOnce(takes, key, fn, options),
  );
  return calls;
}

/** The context object of a call on `source`: the kind the options ask for, never the key. */
function contextOf(source, key, options) {
  const context = { backend: source.backend, driver: source.driver };
  if (typeof options === 'object' && options !== null) {
    const { mode, limit, weight } = options;
    if (typeof mode === 'string') context.mode = mode;
    if (typeof limit === 'number') context.limit = limit;
    if (typeof weight === 'number') context.weight = weight;
  }
  if (Array.isArray(key)) context.keyCount = key.length;
  return context;
}

/** Notes the fence (one key) or fences (several, in key order) of `lease` on `context`. */
function noteFences(context, lease, key) {
  if (typeof lease !== 'object' || lease === null) return;
  try {
    if (Array.isArray(key)) {
      const fences = lease.fences;
      if (fences instanceof Map) context.fences = Array.from(fences.values(), String);
    } else {
      const fence = lease.fence;
      if (fence !== undefined && fence !== null) context.fence = String(fence);
    }
  } catch {
    // An app lease whose getter throws: the trace lacks its fence, the acquire still succeeds.
  }
}

/**
 * Publishes on `channel` around `run()`, a promise (or a value, or a throw:
 * the caller gets a promise either way), filling `context` when it settles:
 * `waitMs` and the fences through `granted(value, waitMs, now)`, else `waitMs`, `code`
 * (a LockError's) and `error`.
 */
function trace(channel, context, run, granted) {
  const startedAt = performance.now();
  return channel.start.runStores(context, () => {
    let pending;
    try {
      pending = Promise.resolve(run());
    } catch (error) {
      pending = Promise.reject(error);
    }
    const traced = pending.then(
      (value) => {
        const now = performance.now();
        granted(value, now - startedAt, now);
        channel.asyncStart.publish(context);
        channel.asyncEnd.publish(context);
        return value;
      },
      (error) => {
        context.waitMs ??= performance.now() - startedAt;
        if (error instanceof LockError) context.code = error.code;
        context.error = error;
        channel.error.publish(context);
        channel.asyncStart.publish(context);
        channel.asyncEnd.publish(context);
        throw error;
      },
    );
    channel.end.publish(context);
    return traced;
  });
}

/** Open holds: lease -> { context, since }, from the grant to the release or loss. */
const holds = new WeakMap();
/** Leases of app drivers granted while traced, whose hold a withLock section reports: lease -> context. */
const unseen = new WeakMap();

/**
 * Traces `run()`, an acquire of `key` with `options` on `source`; the
 * lease's hold starts at the grant when the library sees its release.
 */
function traceAcquire(source, key, options, run) {
  const context = contextOf(source, key, options);
  return trace(acquireChannel, context, run, (lease, waitMs, now) => {
    context.waitMs = waitMs;
    noteFences(context, lease, key);
    if (typeof lease !== 'object' || lease === null) return;
    if (source.seesReleases) startHold(lease, context, now);
    else unseen.set(lease, context);
  });
}

/**
 * Traces withLock of `key` on `source`: `run(section)` runs the backend's
 * withLock with `section` in place of `fn`, which notes the wait and fence
 * when the section starts.
 */
function traceWithLock(source, key, fn, options, run) {
  const context = contextOf(source, key, options);
  const startedAt = performance.now();
  // Not a function: the backend's withLock rejects it (INVALID_ARGUMENT), traced.
  const section =
    typeof fn !== 'function'
      ? fn
      : (lease, signal) => {
          context.waitMs = performance.now() - startedAt;
          noteFences(context, lease, key);
          return fn(lease, signal);
        };
  return trace(withLockChannel, context, () => run(section), () => {});
}

/**
 * Ends the hold of a lease collected unreleased (a store lease is then given
 * back: store.js). V8 runs this only after a full collection, which may come
 * long after the lease was dropped.
 */
const dropped = new FinalizationRegistry((hold) => endHold(hold, false));

/** Starts the hold of `lease` granted at `since` (performance.now()). */
function startHold(lease, context, since) {
  if (!holdStart.hasSubscribers) return;
  const hold = { context, since };
  holds.set(lease, hold);
  dropped.register(lease, hold, lease);
  open.holds++;
  holdChannel.start.publish(context);
  // A hold has no synchronous part: it ends when released or lost.
  holdChannel.end.publish(context);
}

/** A withLock section got `lease`: its hold starts unless it already did (app drivers' leases). */
export function sectionHolds(lease) {
  const context = unseen.get(lease);
  if (context === undefined) return;
  unseen.delete(lease);
  startHold(lease, context, performance.now());
}

/**
 * The hold of `lease` ended: `released` says whether this release let it go,
 * `error` is why it was lost (LEASE_LOST) or its release failed. Nothing for
 * a lease whose hold was not reported, or already ended.
 */
export function holdEnded(lease, released, error) {
  const hold = holds.get(lease);
  if (hold === undefined) return;
  holds.delete(lease);
  dropped.unregister(lease);
  endHold(hold, released, error);
}

/** Publishes the end of `hold` ({ context, since }). */
function endHold(hold, released, error) {
  open.holds--;
  const { context, since } = hold;
  context.heldMs = performance.now() - since;
  context.released = released;
  if (error !== undefined) {
    context.error = error;
    holdChannel.error.publish(context);
  }
  holdChannel.asyncStart.publish(context);
  holdChannel.asyncEnd.publish(context);
}

/** Ends the hold of `lease` when `releasing` (its release's promise of a boolean) settles; returns it. */
export function holdEnding(lease, releasing) {
  return releasing.then(
    (released) => {
      holdEnded(lease, released === true);
      return released;
    },
    (error) => {
      holdEnded(lease, false, error);
      throw error;
    },
  );
}
