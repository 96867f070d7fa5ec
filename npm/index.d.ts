// Types of @dokebi/lock. The option types (options.d.ts) are generated from
// options.schema.json. index.d.cts gives the same declarations to `require`.
/// <reference types="node" />
import type { LockConfig, LockOptions } from './options.js';

export type * from './options.js';

/** Every code a LockError carries. */
export type LockErrorCode =
  | 'INVALID_OPTIONS'
  | 'INVALID_KEY'
  | 'UNKNOWN_BACKEND'
  | 'UNKNOWN_CONNECTION'
  | 'CLOSED'
  | 'LOCK_BUSY'
  | 'KEY_LIMIT'
  | 'QUEUE_FULL'
  | 'ABORTED'
  | 'WAIT_TIMEOUT'
  | 'DRIVER_NOT_INSTALLED'
  | 'DRIVER_INVALID'
  | 'PROVIDER_FAILED'
  | 'OUTCOME_UNKNOWN'
  | 'LEASE_LOST'
  | 'CLEANUP_FAILED'
  | 'CLEANUP_TIMEOUT'
  | 'UNKNOWN_DRIVER'
  | 'DRIVER_CONFLICT'
  | 'INVALID_ENTRY'
  | 'INVALID_EXTENSION'
  | 'INVALID_PLUGIN_OPTIONS'
  | 'INVALID_ARGUMENT'
  | 'UNSUPPORTED_KIND'
  | 'NO_ELIGIBLE_BACKEND'
  // Thrown by the import itself when the addon cannot be loaded.
  | 'PLATFORM_UNSUPPORTED'
  | 'PLATFORM_PACKAGE_MISSING'
  | 'ADDON_VERSION_MISMATCH';

/** One problem of INVALID_OPTIONS, in `details.issues`. */
export interface OptionIssue {
  /** Dotted path relative to the plugin's options, e.g. `backends.shared.leaseMs`. */
  readonly path: string;
  readonly message: string;
  /** UNKNOWN_CONNECTION for a backend naming an undefined connection, else INVALID_OPTIONS (absent in issues an app driver built). */
  readonly code?: 'INVALID_OPTIONS' | 'UNKNOWN_CONNECTION';
}

/**
 * The error base of dokebi plugins: other packages classify by `code` (and
 * `plugin`), and `instanceof DokebiError` holds for every LockError.
 */
export class DokebiError extends Error {
  constructor(
    code: string,
    message: string,
    fields: { readonly plugin: string; readonly fix?: string; readonly data?: object; readonly details?: object; readonly cause?: unknown },
  );
  readonly code: string;
  readonly plugin: string;
  /** One sentence telling what to do about it. */
  readonly fix: string;
  /** Small facts for programs, e.g. `data.reason` of INVALID_EXTENSION. */
  readonly data?: { readonly reason?: string; readonly [field: string]: unknown };
  readonly details?: { readonly [field: string]: unknown };
}

/** The HTTP answer a web host gives for a LockError. */
export interface LockHttpAnswer {
  readonly status: 503;
  readonly code: 'LOCK_OVERLOADED' | 'LOCK_UNAVAILABLE' | 'LOCK_STORE_UNAVAILABLE' | 'REDIS_UNAVAILABLE';
  readonly headers: { readonly 'retry-after': string };
}

/** Every failure of @dokebi/lock. Never carries a lock key. */
export class LockError extends DokebiError {
  /**
   * App drivers may throw one too, e.g. INVALID_OPTIONS with
   * `details.issues` for settings they reject. `fix` comes from `code`.
   */
  constructor(
    code: LockErrorCode,
    message: string,
    extra?: {
      readonly details?: { readonly issues?: readonly OptionIssue[]; readonly [field: string]: unknown };
      readonly data?: object;
      readonly cause?: unknown;
      /** The driver of the backend that raised it: a redis backend's outage answers `http` REDIS_UNAVAILABLE. */
      readonly driver?: string;
    },
  );
  readonly name: 'LockError';
  readonly code: LockErrorCode;
  readonly plugin: 'dokebi-lock';
  /** One sentence telling what to do about it. */
  readonly fix: string;
  /** Structured data, e.g. `{ issues: OptionIssue[] }` for INVALID_OPTIONS. */
  readonly details?: { readonly issues?: readonly OptionIssue[]; readonly [field: string]: unknown };
  /**
   * The answer for web hosts: QUEUE_FULL / KEY_LIMIT -> 503 LOCK_OVERLOADED,
   * CLOSED -> 503 LOCK_UNAVAILABLE, a transient failure of a store
   * (PROVIDER_FAILED, OUTCOME_UNKNOWN, NO_ELIGIBLE_BACKEND) -> 503
   * LOCK_STORE_UNAVAILABLE, or REDIS_UNAVAILABLE when a redis backend raised
   * it (as @dokebi/redis answers), each with `Retry-After: 1`; undefined
   * otherwise.
   */
  readonly http?: LockHttpAnswer;
}

/**
 * What kind of lease an acquire asks for; none of them: a plain exclusive
 * lease. Checked before the driver sees them (INVALID_ARGUMENT): a mode of
 * these two, integers from 1 to 4294967295, a weight at most the limit, no
 * limit or weight with shared mode. A backend whose driver cannot grant the
 * kind rejects with UNSUPPORTED_KIND (an app driver: see DriverBackend.kinds).
 */
export interface KindOptions {
  /**
   * 'exclusive' (the default) or 'shared': shared leases of a key hold it
   * together, an exclusive one alone; FIFO across modes, so a queued writer
   * is not overtaken by later readers.
   */
  readonly mode?: 'exclusive' | 'shared';
  /**
   * A counted lock: at most this many units of the key are held at once
   * (default 1, a plain lock). Every caller of a key gives the same limit;
   * another one while the key is held or waited for is INVALID_ARGUMENT.
   */
  readonly limit?: number;
  /** The units of a counted key this lease holds (default 1), at most `limit`. */
  readonly weight?: number;
}

/** Per-call options of an acquire. */
export interface AcquireOptions extends KindOptions {
  /** Ends the wait with ABORTED (its `cause`: the signal's reason); does nothing once the lease is granted. */
  readonly signal?: AbortSignal;
  /**
   * How long to wait for a held key (integer ms, 0 to 2147483647): 0 tries
   * once, then LOCK_BUSY; past it, WAIT_TIMEOUT. Default: the backend's
   * waitTimeoutMs.
   */
  readonly waitTimeoutMs?: number;
  /**
   * Who holds this lease, as `inspect` and another acquire's WAIT_TIMEOUT
   * or LOCK_BUSY `details` name it (a job, a request, a tenant; never a
   * secret: anyone who reads the store reads it). Default: the provider's
   * `holder` option. Checked as that option (INVALID_ARGUMENT): not empty,
   * no control or invisible formatting characters, at most 40 bytes as
   * stored.
   */
  readonly holder?: string;
}

/** A held lock on one key (an acquire of an array of keys gives a KeysLease). */
export interface Lease extends AsyncDisposable {
  /** The acquired key (of a KeysLease: its first key). */
  readonly key: string;
  /** local, file: true until release or close. redis, postgres, mysql: a conservative local estimate. */
  readonly valid: boolean;
  /** local, file: Infinity while valid. redis, postgres, mysql: the lease time left. 0 when invalid. */
  readonly remainingMs: number;
  /** Fencing token: a decimal string that grows with every acquire; compare with BigInt. */
  readonly fence: string;
  /** local, file: resolves to `valid`. redis, postgres, mysql: extends the lease after checking ownership. */
  renew(): Promise<boolean>;
  /**
   * True when this call released (and handed on) the lease, false when already
   * released. redis, postgres, mysql: rejects with LEASE_LOST when the key no longer carried our token;
   * file: when its lock file or directory was removed or replaced while held.
   */
  release(): Promise<boolean>;
  /** A lease of a policy backend: the member that granted it (the lease lives there for its whole life); absent for the other drivers. */
  readonly served?: PolicyMember;
}

/** A member of a policy backend: the one that granted a lease (`lease.served`), or one a rule allows. */
export interface PolicyMember {
  /** The member backend's name. */
  readonly backend: string;
  /** Its driver: 'local', 'file', 'redis' or 'postgres'. */
  readonly driver: string;
  /** What it can promise: 'process' (local) < 'host' (file) < 'shared' (redis, postgres). */
  readonly tier: PolicyTier;
  /** Its leases carry fences; they compare only with fences of the same member. */
  readonly fenced: boolean;
}

/** Which member of a policy backend granted a key's last lease, and when. */
export interface PolicyServed extends PolicyMember {
  /** When it granted, in ms since the Unix epoch. */
  readonly servedAtMs: number;
}

/** The tiers of a policy's members, lowest first: 'process' < 'host' < 'shared'. */
export type PolicyTier = 'process' | 'host' | 'shared';

/** What a policy backend says of one key (`keyStatus(key)`). */
export interface PolicyKeyStatus {
  /** The rule it falls under: 'rules[<i>]' or 'default'. */
  readonly rule: string;
  /** That rule's pattern, 'prefix:<text>' or 'glob:<text>'; null for the default rule. */
  readonly pattern: string | null;
  /** The members the rule allows, preferred first. */
  readonly backends: readonly PolicyMember[];
  /** The rule's minimum tier. */
  readonly minTier: PolicyTier;
  /** What the rule does while its preferred member cannot serve. */
  readonly onUnavailable: 'failClosed' | 'fallBack';
  /** The key's last acquisition through this policy in this process (the last 10,000 keys are kept); null if none. */
  readonly last: PolicyServed | null;
}

/** One member of a policy backend in `status().members`. */
export interface PolicyMemberStatus {
  readonly backend: string;
  readonly driver: string;
  readonly tier: PolicyTier;
  /** Acquires it served. */
  readonly served: number;
  /** Of those, acquires whose rule prefers another member. */
  readonly fallbacks: number;
  /** NO_ELIGIBLE_BACKEND refusals of rules that prefer it. */
  readonly refusals: number;
  /** Found unavailable: passed over until its reprobeCooldownMs ends. */
  readonly skipped: boolean;
}

/**
 * One lease over several keys (`acquire([k1, k2])`): every key or none,
 * without deadlock between callers asking for overlapping sets in any
 * order. `renew()` and `release()` cover every key.
 */
export interface KeysLease extends Lease {
  /** Every key, in the order the acquire gave them. */
  readonly keys: readonly string[];
  /** Each key's fence (decimal strings, compare with BigInt), by key. */
  readonly fences: ReadonlyMap<string, string>;
}

/** Options of withLock: those of acquire, plus autoRenew. */
export interface WithLockOptions extends AcquireOptions {
  /**
   * redis, postgres, mysql: renew the lease every leaseMs / 3 on the driver's thread while fn
   * runs (default true). With false the lease is still watched: the section's signal
   * aborts (LEASE_LOST) when it runs out. Local and file leases never expire.
   */
  readonly autoRenew?: boolean;
}

/**
 * What status() reports: counts only, never keys. For a backend of an app
 * driver that supplies no status() of its own, the library reports what it
 * sees: the driver name and the acquires made through the backend (`waiting`
 * counts every acquire in progress), with `held` and `lost` null.
 */
export interface BackendStatus {
  /** The driver name: 'local', 'redis', 'postgres', 'mysql', 'file', 'policy' or an app driver's. */
  readonly driver: string;
  /** Leases held now by this process; null when the driver does not report it. */
  readonly held: number | null;
  /** Of `held`, the leases held in shared mode (absent when the driver does not report it). */
  readonly heldShared?: number;
  /** Acquires waiting now. */
  readonly waiting: number;
  /** Leases granted since the backend opened. */
  readonly acquired: number;
  /** Waits that ended in WAIT_TIMEOUT since the backend opened. */
  readonly timedOut: number;
  /** Leases found lost (LEASE_LOST, OUTCOME_UNKNOWN); always 0 for local backends; null when the driver does not report it. */
  readonly lost: number | null;
  /** The connection's health, for redis backends. */
  readonly redis?: RedisStatus;
  /** The connection's health, for postgres backends. */
  readonly postgres?: PostgresStatus;
  /** The connection's health, for mysql backends. */
  readonly mysql?: MysqlStatus;
  /** policy backends: each member's counts and whether it is skipped now. */
  readonly members?: readonly PolicyMemberStatus[];
}

/** The health of a redis backend's connection. */
export interface RedisStatus {
  /** The command connection answered its last command or probe. */
  readonly connected: boolean;
  /** The pub/sub subscription that wakes waiters is live. */
  readonly subscribed: boolean;
  /** The code of the last failure talking to Redis. */
  readonly lastError: LockErrorCode | null;
  /** When Redis last answered, in ms since the Unix epoch. */
  readonly lastProbeAt: number | null;
}

/** The health of a postgres backend's connection. */
export interface PostgresStatus {
  /** The last lock statement was answered. */
  readonly connected: boolean;
  /** The LISTEN connection that wakes waiters is live (else waiters poll at pollIntervalMs). */
  readonly listening: boolean;
  /** The code of the last failure talking to PostgreSQL. */
  readonly lastError: LockErrorCode | null;
  /** When PostgreSQL last answered a lock statement, in ms since the Unix epoch. */
  readonly lastAnswerAt: number | null;
}

/** The health of a mysql backend's connection. */
export interface MysqlStatus {
  /** The last lock statement was answered. */
  readonly connected: boolean;
  /** The poller that reads the release log and wakes waiters is live (else waiters poll at pollIntervalMs). */
  readonly polling: boolean;
  /** The code of the last failure talking to MySQL. */
  readonly lastError: LockErrorCode | null;
  /** When MySQL last answered a lock statement, in ms since the Unix epoch. */
  readonly lastAnswerAt: number | null;
}

/**
 * Payloads of the node:diagnostics_channel channels `dokebi-lock:<name>`.
 * They carry the backend, codes and durations (ms), never keys.
 */
export interface TelemetryPayloads {
  /** A wait reached slowAcquireMs; `code` is the error it ended with, absent when granted. */
  'slow-acquire': {
    readonly backend: string;
    readonly waitedMs: number;
    readonly thresholdMs: number;
    readonly code?: LockErrorCode;
    /** Of a WAIT_TIMEOUT or LOCK_BUSY: the error's details, who held the key (when they could be read). */
    readonly details?: HeldDetails;
  };
  /** A lease reached slowHoldMs when it was released. */
  'slow-hold': { readonly backend: string; readonly heldMs: number; readonly thresholdMs: number };
  /** A wait ended with WAIT_TIMEOUT. */
  'wait-timeout': {
    readonly backend: string;
    readonly waitedMs: number;
    readonly code: 'WAIT_TIMEOUT';
    /** The error's details: who held the key (when they could be read). */
    readonly details?: HeldDetails;
  };
  /** A lease of a redis, postgres, mysql or file backend turned out lost (OUTCOME_UNKNOWN: redis, postgres, mysql). */
  'lease-lost': { readonly backend: string; readonly code: 'LEASE_LOST' | 'OUTCOME_UNKNOWN' };
  /** A Redis, PostgreSQL or MySQL connection (a name of the connections of dokebi-redis, dokebi-postgres or dokebi-mysql) went up or down. */
  connection: { readonly connection: string; readonly up: boolean };
  /**
   * redis backends only: a Redis server granted a fence at least a second below one granted before the request
   * was sent: its clock is at least `behindMs` behind the latest server time the connection
   * saw (a primary promoted with a clock behind). Fences never repeat while that stays under
   * the backend's `fenceRetentionMs`; past it they can. At most one every 10 s per
   * connection; the log says so too (`REDIS_CLOCK_BEHIND`).
   */
  'clock-behind': { readonly backend: string; readonly connection: string; readonly behindMs: number; readonly fenceRetentionMs: number };
  /** A policy backend's acquire was served by `member`, not the rule's `preferred` member, which could not (`code`). */
  'policy-fallback': { readonly backend: string; readonly member: string; readonly preferred: string; readonly code: LockErrorCode };
  /** A policy backend found its `member` unavailable (`code`, `reason`: the member's error message): passed over for reprobeCooldownMs. */
  'policy-skipped': { readonly backend: string; readonly member: string; readonly code: LockErrorCode; readonly reason: string };
  /** A skipped `member` answered again after `skippedMs`: acquires use it again. */
  'policy-back': { readonly backend: string; readonly member: string; readonly skippedMs: number };
  /**
   * A key was force-released (`forceRelease`): `removed` live holders removed (0 when it was free), and on a
   * store driver its fence counter raised to `fence` (a decimal string; absent on the local driver). Each
   * backend that broke it reports it (a policy's members, not the policy).
   */
  'forced-release': { readonly backend: string; readonly removed: number; readonly fence?: string };
}

/**
 * The context object of the tracing channel `dokebi-lock:with-lock`
 * (node:diagnostics_channel `tracingChannel`), one per withLock call,
 * published as `tracingChannel.tracePromise` does: `start` (its bound stores
 * run for the section), `end` when the call returned its promise, then, when
 * that settles, `error` (if it rejects), `asyncStart` and `asyncEnd`. The
 * library fills the fields below as they become known. Never a key (nor a
 * label of one), and no `result` (a lease carries its key; fn's output is
 * the app's).
 */
export interface WithLockTraceContext {
  /** The backend's name in the options. */
  readonly backend: string;
  /** Its driver: 'local', 'redis', 'postgres', 'mysql', 'file' or an app driver's name. */
  readonly driver: string;
  /** The kind fields the options gave (only those given). */
  readonly mode?: 'exclusive' | 'shared';
  readonly limit?: number;
  readonly weight?: number;
  /** How many keys, for several keys (an array). */
  readonly keyCount?: number;
  /** ms from the call to the grant (the section's start), or to the failure. */
  waitMs?: number;
  /** The lease's fence (one key), or each key's fence in key order (several keys). */
  fence?: string;
  fences?: string[];
  /** The code of a LockError the call rejected with (WAIT_TIMEOUT, LEASE_LOST, ...). */
  code?: LockErrorCode;
  /** What the call rejected with (fn's own error included), set before `error`. */
  error?: unknown;
}

/**
 * The context object of the tracing channels `dokebi-lock:acquire` and
 * `dokebi-lock:hold`: one per acquire, every backend (withLock's acquire
 * included). On `dokebi-lock:acquire` it is published as `tracePromise`
 * does (`start`, `end`, then `error` if it fails, `asyncStart`, `asyncEnd`).
 * A granted lease's hold is then published on `dokebi-lock:hold` with the
 * same object: `start` and `end` at the grant, then `error` (lost: a
 * LEASE_LOST, or its release failed), `asyncStart` and `asyncEnd` when the
 * release settles or the loss is known, with `heldMs` and `released` set.
 * Holds are reported for the built-in drivers' leases and, for an app
 * driver's leases, inside withLock (the library sees no other release); a
 * lease granted while nobody listened reports none. A call is traced while
 * its channel's `start` has subscribers (one check per call): subscribe
 * with a start handler.
 */
export interface AcquireTraceContext extends WithLockTraceContext {
  /** ms from the grant to the release or loss (set at the end of the hold). */
  heldMs?: number;
  /** Whether the release let the lease go (false: lost, or already gone). */
  released?: boolean;
}

/**
 * One configured backend: every backend a provider hands out has the whole
 * API, whatever its driver or wrapBackend supplied (see DriverBackend).
 */
export interface LockBackend {
  /**
   * Acquires `key` (non-empty, well-formed, without U+0000, at most maxKeyBytes of UTF-8).
   * Same key: FIFO among this process's waiters; different keys: held at once.
   * Rejects with LockError: INVALID_KEY, INVALID_ARGUMENT, LOCK_BUSY,
   * WAIT_TIMEOUT, ABORTED, KEY_LIMIT, QUEUE_FULL, CLOSED; redis, postgres and mysql
   * also PROVIDER_FAILED and OUTCOME_UNKNOWN, file also PROVIDER_FAILED.
   */
  acquire(key: string, options?: AcquireOptions): Promise<Lease>;
  /**
   * Acquires every key of `keys` (at least one, none twice) as one lease, or
   * none of them: a wait covers the whole set, and WAIT_TIMEOUT or ABORTED
   * leave nothing held.
   */
  acquire(keys: readonly string[], options?: AcquireOptions): Promise<KeysLease>;
  /** One key or several, when the caller's type does not say which. */
  acquire(key: string | readonly string[], options?: AcquireOptions): Promise<Lease>;
  /**
   * Acquires `key`, runs `fn(lease, signal)` and releases the lease whatever
   * fn did; resolves with fn's value, rejects with fn's error. fn is called
   * after withLock has returned, never inside the call. redis, postgres, mysql: the
   * lease is renewed on the driver's thread while fn runs (autoRenew); the
   * moment it is lost, `signal` aborts (reason: LEASE_LOST) and withLock
   * rejects with LEASE_LOST as soon as fn settles, even if fn succeeded
   * (the lost lease is released in the background; a loss found by the
   * release is LEASE_LOST too, with fn's error as its cause if fn threw).
   * On every driver, close() during the section takes its lease: `signal`
   * aborts and withLock rejects with LEASE_LOST. `signal` also aborts when
   * `options.signal` does; fn decides whether to stop. A backend whose driver
   * or wrapBackend supplies no withLock gets this one, built on its acquire:
   * a redis, postgres or mysql lease it hands out keeps the core's renewals; another lease that
   * expires (finite remainingMs) is renewed with `renew()` on JS timers,
   * every third of its time left at the grant.
   */
  withLock<T>(key: string, fn: (lease: Lease, signal: AbortSignal) => T | PromiseLike<T>, options?: WithLockOptions): Promise<Awaited<T>>;
  /** withLock over several keys at once, as acquire(keys) takes them. */
  withLock<T>(keys: readonly string[], fn: (lease: KeysLease, signal: AbortSignal) => T | PromiseLike<T>, options?: WithLockOptions): Promise<Awaited<T>>;
  /** One key or several, when the caller's type does not say which. */
  withLock<T>(key: string | readonly string[], fn: (lease: Lease, signal: AbortSignal) => T | PromiseLike<T>, options?: WithLockOptions): Promise<Awaited<T>>;
  /** What the backend is doing now, as counts. */
  status(): BackendStatus;
  /**
   * What the backend's store holds of `key` now, read at once: the store's
   * own view, so every process's holders and waiters (local: this backend's).
   * A read: it takes, extends and changes nothing. A policy reads the members
   * its rule allows and answers from the first where the key is held, else
   * with a member's failure, else from the first where acquires wait.
   * Rejects with INVALID_KEY, CLOSED, PROVIDER_FAILED; INVALID_ARGUMENT on
   * an app driver's backend that gives no inspect of its own. The file
   * driver reads the records its holders write (docs/file.md).
   */
  inspect(key: string): Promise<Inspection>;
  /**
   * An operator's break of a stuck lock: removes every holder of `key` at
   * once, as if each lease had ended now, and the waiters are granted as
   * after a release. On a store driver it raises the key's fence counter in
   * the same step: the answer's `fence` is above every fence the key was
   * granted, and every later grant's is above it (write it to a fenced store
   * to shut out the removed holders' late writes). A removed holder learns
   * it at its next call to the store (a renewal: LEASE_LOST, `valid` false,
   * a withLock section's signal aborts; its release rejects with
   * LEASE_LOST); a local one at once (`valid` false, its release false,
   * withLock LEASE_LOST). Logged as a warning (LOCK_FORCE_RELEASED) and
   * published on `dokebi-lock:forced-release` (TelemetryPayloads). A
   * policy breaks the key on every member its rule allows. Rejects as
   * inspect does, and with OUTCOME_UNKNOWN when the store's answer was lost
   * (run it again if inspect still shows the holder: the lost break,
   * delivered late, changes nothing once the key was granted or broken
   * since); INVALID_ARGUMENT on the file driver
   * (the kernel holds another process's lock) and on an app driver's
   * backend that gives no forceRelease of its own.
   */
  forceRelease(key: string): Promise<ForcedRelease>;
}

/** What `forceRelease(key)` did. */
export interface ForcedRelease {
  /** The backend whose store it changed (a policy: the first member that had a holder, else its first). */
  readonly backend: string;
  /** Live holders removed: 0 when the key was free (a store's fence is raised all the same). */
  readonly removed: number;
  /** The key's fence counter as raised (decimal string); null on the local driver, whose fences are the backend's. */
  readonly fence: string | null;
}

/** What `inspect(key)` read of one key. */
export interface Inspection {
  /** The backend that answered (a policy's member, for a policy). */
  readonly backend: string;
  /** How the key is held; null when free. */
  readonly mode: 'exclusive' | 'shared' | null;
  /** The key's limit: above 1 for a counted key. */
  readonly limit: number;
  /** Live holders: a shared or counted key may have several. */
  readonly held: number;
  /** The first 64 of them: soonest expiry first (store drivers), oldest grant first (local). */
  readonly holders: readonly InspectedHolder[];
  /** Acquires waiting for the key that the store knows of (on a store driver, one per waiting acquire of each process at its head). */
  readonly waiting: number;
  /** No fence granted on this key so far is larger (decimal string); null when the store kept none, and on the local driver. */
  readonly fence: string | null;
}

/** One live holder in an Inspection. */
export interface InspectedHolder {
  /** Who holds it: its provider's `holder` label (host name and pid by default); null for a lease taken by a release before labels. */
  readonly label: string | null;
  /** Units it holds: 1 unless the key is counted. */
  readonly units: number;
  /** Until its lease expires unless renewed; null on the local driver, whose leases do not expire. */
  readonly remainingMs: number | null;
  /** The fence its grant got (decimal string); null where the store kept none (see docs/locks.md). */
  readonly fence: string | null;
  /** How long it has held the key, at least, by the store's clock (the process's on local); null where not known. */
  readonly heldForMs: number | null;
}

/**
 * `details` of a WAIT_TIMEOUT or LOCK_BUSY: the holders of the key that kept the acquire out, read
 * when the wait ended (absent when that read failed, and on the file driver).
 */
export interface HeldDetails {
  /** As in an Inspection (at most 64). */
  readonly holders: readonly InspectedHolder[];
  /** Live holders of the key. */
  readonly held: number;
  /** Acquires waiting for it, as in an Inspection. */
  readonly waiting: number;
  /** For an acquire of several keys: the place, in its keys, of the one told (the first found held). */
  readonly keyIndex?: number;
}

/** The backend of a `driver: policy` backend: a LockBackend that also answers per key. */
export interface PolicyBackend extends LockBackend {
  /** The rule `key` falls under and its last acquisition through this policy. */
  keyStatus(key: string): PolicyKeyStatus;
}

/** Receives the operational log: fields are `backend` and `code` only. */
export interface LockLogger {
  debug(fields: { backend: string; code: string }, message: string): void;
  /** Driver warnings (e.g. a Redis eviction policy that may drop locks); `error` when absent. */
  warn?(fields: { backend: string; code: string }, message: string): void;
  error(fields: { backend: string; code: string }, message: string): void;
}

/** Every configured backend by name. */
export class LockProvider implements AsyncDisposable {
  private constructor();
  /** The configured backend names, sorted. */
  names(): string[];
  /**
   * The backend `name`; throws UNKNOWN_BACKEND, or CLOSED after close(). For
   * an app driver or a wrapBackend, the app's object with every member it
   * has (see DriverBackend).
   */
  backend(name: string): LockBackend;
  /** The status() of every backend, by name. */
  status(): Record<string, BackendStatus>;
  /** Rejects waiters with CLOSED and invalidates held leases; idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Where openLock reads the options from: exactly one of yaml, file, config;
 * plus app drivers (`drivers`) and an extension entry module (`entry`).
 */
export type OpenLockInput = (
  | { readonly yaml: string; readonly file?: undefined; readonly config?: undefined }
  | { readonly file: string | URL; readonly yaml?: undefined; readonly config?: undefined }
  | { readonly config: LockConfig; readonly yaml?: undefined; readonly file?: undefined }
) & { readonly logger?: LockLogger; readonly drivers?: LockDrivers; readonly entry?: LockExtensionEntry };

/** Opens a provider for apps without a dokebi host. */
export function openLock(input: OpenLockInput): Promise<LockProvider>;

/** Names the plugin that provides it (its `name`); an optional one may be left out of the app. */
export interface PluginToken {
  readonly name: string;
  readonly optional?: boolean;
}

/** The token a consumer plugin names in `metadata.dependencies`. */
export declare const dependency: { readonly name: 'dokebi-lock'; readonly description: string };

/**
 * The plugin's own (optional) dependency when a backend has driver: redis:
 * a registered dokebi-redis plugin's value `{ options: { connections } }`
 * supplies the connections.
 */
export declare const redisDependency: { readonly name: 'dokebi-redis'; readonly optional: true; readonly description: string };

/**
 * The plugin's own (optional) dependency when a backend has driver:
 * postgres: a registered dokebi-postgres plugin's value
 * `{ options: { connections } }` supplies the connections.
 */
export declare const postgresDependency: { readonly name: 'dokebi-postgres'; readonly optional: true; readonly description: string };

/**
 * The plugin's own (optional) dependency when a backend has driver: mysql:
 * a registered dokebi-mysql plugin's value `{ options: { connections } }`
 * supplies the connections.
 */
export declare const mysqlDependency: { readonly name: 'dokebi-mysql'; readonly optional: true; readonly description: string };

/** What a dokebi host passes to the plugin's start and stop. */
export interface PluginContext {
  readonly logger?: LockLogger;
  getDependency<T = unknown>(token: object): T;
}

/** The dokebi-lock plugin (see README, "Plugin contract"). */
export interface LockPlugin {
  readonly name: 'dokebi-lock';
  readonly metadata: { readonly dependencies: readonly PluginToken[] };
  readonly provides: typeof dependency;
  start(context: PluginContext): Promise<LockProvider>;
  stop(context: PluginContext): Promise<void>;
}

/** Input of createPlugin. */
export interface CreatePluginInput {
  /**
   * The host app; its `config['dokebi-lock']`, `config['dokebi-redis']`,
   * `config['dokebi-postgres']` and `config['dokebi-mysql']` are read. With a
   * redis (postgres, mysql) backend, `start` checks that `@dokebi/lock-redis`
   * (`@dokebi/lock-postgres`, `@dokebi/lock-mysql`) resolves, through `resolve` when the host offers it, else from `root`
   * (the app's directory), else from the process's entry module (never the
   * working directory): DRIVER_NOT_INSTALLED otherwise.
   */
  readonly app: { readonly config?: LockConfig; readonly root?: string | URL; resolve?(specifier: string): string };
  /** The dokebi-lock section to use instead of `app.config['dokebi-lock']`. */
  readonly options?: LockOptions;
  /** The extension entry module (`await import('./src/infra/lock/extension.js')`). */
  readonly entry?: LockExtensionEntry;
}

/**
 * Creates the plugin. Throws INVALID_PLUGIN_OPTIONS (cause: INVALID_OPTIONS),
 * INVALID_ENTRY, INVALID_EXTENSION, DRIVER_CONFLICT, UNKNOWN_DRIVER.
 */
export function createPlugin(input: CreatePluginInput): LockPlugin;

/** createPlugin with the app drivers `drivers` registered too (DRIVER_CONFLICT on a clash). */
export function defineLockPlugin(definition: { readonly drivers: LockDrivers }): (input: CreatePluginInput) => LockPlugin;

// Extensions (README, "Extensions").

/**
 * What an app driver (its `view`) or wrapBackend must supply: `acquire`.
 * `withLock` and `status` are optional. The backend users get is a Proxy
 * over this object: it has every member of the object (read and written on
 * it, its methods called on it, so `#private` fields work, and `instanceof`
 * its class holds), with the library's `acquire` (the kind check below),
 * `withLock` (this object's own, else the built-in one on its acquire) and
 * `status` (its own, else as BackendStatus tells), `inspect` and
 * `forceRelease` (its own, else INVALID_ARGUMENT). Reach the other members
 * with a cast: `provider.backend('b') as LockBackend & MyBackend`. The
 * built-in backends are handed out as they are.
 */
export interface DriverBackend extends Partial<Pick<LockBackend, 'status' | 'inspect' | 'forceRelease'>> {
  /**
   * Acquires one key. With `kinds.keys` it also gets arrays of keys: type
   * the key `string | readonly string[]` and resolve a KeysLease for them.
   */
  acquire(key: string, options?: AcquireOptions): Promise<Lease>;
  /** Optional: the library's withLock, on this acquire, where absent. */
  withLock?<T>(key: string, fn: (lease: Lease, signal: AbortSignal) => T | PromiseLike<T>, options?: WithLockOptions): Promise<Awaited<T>>;
  /**
   * The kinds this object grants beyond plain exclusive leases on one key,
   * read once when the backend opens; absent: plain leases only. An acquire
   * (or withLock) of a kind not declared is refused with UNSUPPORTED_KIND
   * and never reaches this object; a declared one reaches it with the
   * caller's key (a `readonly string[]` for several keys) and options
   * unchanged, after the library checked them (INVALID_ARGUMENT, see
   * KindOptions). A wrapper that passes both on to `input.backend`
   * may declare every kind: that backend refuses what its driver cannot do.
   */
  readonly kinds?: LockKinds;
}

/** What a DriverBackend declares it grants (DriverBackend.kinds); a kind absent or false is refused. */
export interface LockKinds {
  /** `mode: 'shared'`. */
  readonly shared?: boolean;
  /** A counted lock: `limit` above 1, with a `weight`. */
  readonly limit?: boolean;
  /** An array of keys (several keys at once), even of one key. */
  readonly keys?: boolean;
}

/** What a driver returns for one backend. */
export interface LockDriver {
  /** The backend behind `provider.backend(name)` (with the whole LockBackend API added, see DriverBackend). */
  readonly view: DriverBackend;
  /** Called once at provider close; a rejection is logged (fields backend, code), never thrown. */
  close(): Promise<void>;
}

/** The input of an app driver factory, once per backend of that driver. */
export interface DriverInput {
  /** The backend name. */
  readonly name: string;
  /** The driver name, as in `driver:`. */
  readonly driver: string;
  /**
   * The backend's settings besides `driver`, unvalidated by the core: the
   * driver validates them (throw a LockError INVALID_OPTIONS with
   * `details.issues`, paths under `path`). Empty for built-in drivers.
   */
  readonly settings: Readonly<Record<string, unknown>>;
  /** `backends.<name>`: the prefix of this backend's option paths. */
  readonly path: string;
  readonly logger: LockLogger;
  /** The host's getDependency (createPlugin only), for the tokens of `dependencies()`. */
  readonly getDependency?: <T = unknown>(token: object) => T;
}

/** Builds the driver of one backend (may be async). */
export type DriverFactory = (input: DriverInput) => LockDriver | Promise<LockDriver>;

/** App drivers by name (`export const drivers` of the entry module). */
export type LockDrivers = { readonly [name: string]: DriverFactory };

/** The input of createDriver. */
export interface CreateDriverInput extends DriverInput {
  /** Opens the registered driver (built-in or app) of this backend. */
  open(): Promise<LockDriver>;
}

/** The input of wrapBackend. */
export interface WrapBackendInput {
  readonly name: string;
  readonly driver: string;
  /** The backend the driver made, with the whole LockBackend API. */
  readonly backend: LockBackend;
}

/**
 * The base class of the app's extension. Override any of the three hooks; a
 * hook you do not override is never called. A subclass takes no constructor
 * parameters and redefines no other member (INVALID_EXTENSION).
 */
export class LockExtension {
  /** Tokens of plugins this extension needs; called once by createPlugin. */
  protected dependencies(): readonly PluginToken[];
  /** Once per backend: return `input.open()` or your own driver. */
  protected createDriver(input: CreateDriverInput): LockDriver | Promise<LockDriver>;
  /**
   * Once per backend: the backend users get instead of `input.backend`.
   * Supplying `acquire` is enough (see DriverBackend).
   */
  protected wrapBackend(input: WrapBackendInput): DriverBackend;
}

/**
 * The entry module: exactly one LockExtension subclass (default or named
 * export) and optionally `drivers`.
 */
export interface LockExtensionEntry {
  readonly default?: new () => LockExtension;
  readonly drivers?: LockDrivers;
  readonly [name: string]: unknown;
}
