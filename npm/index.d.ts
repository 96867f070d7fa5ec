// Types of @dokebi/lock. The option types (options.d.ts) are generated from
// options.schema.json.
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
  | 'INVALID_ARGUMENT';

/** One problem of INVALID_OPTIONS, in `details.issues`. */
export interface OptionIssue {
  /** Dotted path relative to the plugin's options, e.g. `backends.shared.leaseMs`. */
  readonly path: string;
  readonly message: string;
}

/** The HTTP answer a web host gives for a LockError. */
export interface LockHttpAnswer {
  readonly status: 503;
  readonly code: 'LOCK_OVERLOADED' | 'LOCK_UNAVAILABLE' | 'REDIS_UNAVAILABLE';
  readonly headers: { readonly 'retry-after': string };
}

/** Every failure of @dokebi/lock. Never carries a lock key. */
export class LockError extends Error {
  private constructor();
  readonly name: 'LockError';
  readonly code: LockErrorCode;
  readonly plugin: 'dokebi-lock';
  /** One sentence telling what to do about it. */
  readonly fix: string;
  /** Structured data, e.g. `{ issues: OptionIssue[] }` for INVALID_OPTIONS. */
  readonly details?: { readonly issues?: readonly OptionIssue[]; readonly [field: string]: unknown };
  /**
   * The answer for web hosts: QUEUE_FULL / KEY_LIMIT -> 503 LOCK_OVERLOADED,
   * CLOSED -> 503 LOCK_UNAVAILABLE, a transient Redis failure -> 503
   * REDIS_UNAVAILABLE, each with `Retry-After: 1`; undefined otherwise.
   */
  readonly http?: LockHttpAnswer;
}

/** Per-call options of an acquire. */
export interface AcquireOptions {
  /** Ends the wait with ABORTED; does nothing once the lease is granted. */
  readonly signal?: AbortSignal;
  /**
   * How long to wait for a held key (integer ms, 0 to 2147483647): 0 tries
   * once, then LOCK_BUSY; past it, WAIT_TIMEOUT. Default: the backend's
   * waitTimeoutMs.
   */
  readonly waitTimeoutMs?: number;
}

/** A held lock on one key. */
export interface Lease extends AsyncDisposable {
  /** The acquired key. */
  readonly key: string;
  /** local: true until release or close. redis: a conservative local estimate. */
  readonly valid: boolean;
  /** local: Infinity while valid. redis: the lease time left. 0 when invalid. */
  readonly remainingMs: number;
  /** Fencing token: a decimal string that grows with every acquire; compare with BigInt. */
  readonly fence: string;
  /** local: resolves to `valid`. redis: extends the lease after checking ownership. */
  renew(): Promise<boolean>;
  /**
   * True when this call released (and handed on) the lease, false when already
   * released. redis: rejects with LEASE_LOST when the key no longer carried our token.
   */
  release(): Promise<boolean>;
}

/** One configured backend. */
export interface LockBackend {
  /**
   * Acquires `key` (non-empty, well-formed, at most maxKeyBytes of UTF-8).
   * Same key: FIFO among this process's waiters; different keys: held at once.
   * Rejects with LockError: INVALID_KEY, INVALID_ARGUMENT, LOCK_BUSY,
   * WAIT_TIMEOUT, ABORTED, KEY_LIMIT, QUEUE_FULL, CLOSED; redis also
   * PROVIDER_FAILED and OUTCOME_UNKNOWN.
   */
  acquire(key: string, options?: AcquireOptions): Promise<Lease>;
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
  /** The backend `name`; throws UNKNOWN_BACKEND, or CLOSED after close(). */
  backend(name: string): LockBackend;
  /** Rejects waiters with CLOSED and invalidates held leases; idempotent. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** Where openLock reads the options from: exactly one of yaml, file, config. */
export type OpenLockInput = (
  | { readonly yaml: string; readonly file?: undefined; readonly config?: undefined }
  | { readonly file: string | URL; readonly yaml?: undefined; readonly config?: undefined }
  | { readonly config: LockConfig; readonly yaml?: undefined; readonly file?: undefined }
) & { readonly logger?: LockLogger };

/** Opens a provider for apps without a dokebi host. */
export function openLock(input: OpenLockInput): Promise<LockProvider>;

/** The token a consumer plugin names in `metadata.dependencies`. */
export declare const dependency: { readonly name: 'dokebi-lock'; readonly description: string };

/** What a dokebi host passes to the plugin's start and stop. */
export interface PluginContext {
  readonly logger?: LockLogger;
  getDependency<T = unknown>(token: object): T;
}

/** The dokebi-lock plugin (see README, "Plugin contract"). */
export interface LockPlugin {
  readonly name: 'dokebi-lock';
  readonly metadata: { readonly dependencies: readonly object[] };
  readonly provides: typeof dependency;
  start(context: PluginContext): Promise<LockProvider>;
  stop(context: PluginContext): Promise<void>;
}

/** Input of createPlugin. */
export interface CreatePluginInput {
  /** The host app; its `config['dokebi-lock']` and `config['dokebi-redis']` are read. */
  readonly app: { readonly config?: LockConfig };
  /** The dokebi-lock section to use instead of `app.config['dokebi-lock']`. */
  readonly options?: LockOptions;
  /** Extension entry module: not supported by this version (INVALID_ENTRY). */
  readonly entry?: never;
}

/** Creates the plugin; invalid options throw INVALID_PLUGIN_OPTIONS (cause: INVALID_OPTIONS). */
export function createPlugin(input: CreatePluginInput): LockPlugin;
