// An app driver: leases in a SQLite file (node:sqlite, built into Node 24),
// shared by every process on this machine that opens the same file. Owner
// tokens, expiry (leaseMs) and fencing tokens as the built-in redis driver
// has them; waiters poll every pollIntervalMs. Keys are stored as SHA-256
// hashes, never in clear.
import { DatabaseSync } from 'node:sqlite';
import { createHash, randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { LockError } from '../../../../../npm/index.js';
import type { AcquireOptions, DriverBackend, DriverInput, Lease, LockDriver, OptionIssue } from '../../../../../npm/index.js';

interface Settings {
  file: string;
  leaseMs: number;
  waitTimeoutMs: number;
  pollIntervalMs: number;
}

const TRUE = Promise.resolve(true);

/**
 * The core passes app-driver settings through unvalidated: this driver checks
 * its own and reports every problem at once, as the core does for its drivers.
 */
function readSettings({ settings, path }: DriverInput): Settings {
  const issues: OptionIssue[] = [];
  const known = new Set(['file', 'leaseMs', 'waitTimeoutMs', 'pollIntervalMs']);
  for (const field of Object.keys(settings)) if (!known.has(field)) issues.push({ path: `${path}.${field}`, message: 'unknown field' });
  const integer = (field: string, fallback: number | undefined, min: number): number => {
    const value = settings[field] ?? fallback;
    if (value === undefined) issues.push({ path: `${path}.${field}`, message: 'required' });
    else if (!Number.isInteger(value) || (value as number) < min) issues.push({ path: `${path}.${field}`, message: `must be an integer >= ${min}` });
    return value as number;
  };
  if (typeof settings.file !== 'string' || settings.file === '') issues.push({ path: `${path}.file`, message: 'required: the SQLite file path' });
  const result = {
    file: settings.file as string,
    leaseMs: integer('leaseMs', undefined, 1),
    waitTimeoutMs: integer('waitTimeoutMs', 5000, 0),
    pollIntervalMs: integer('pollIntervalMs', 25, 1),
  };
  if (issues.length > 0) {
    throw new LockError('INVALID_OPTIONS', `invalid options: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`, { details: { issues } });
  }
  return result;
}

class SqliteLease implements Lease {
  readonly key: string;
  readonly fence: string;
  #store: SqliteStore;
  #hash: string;
  #owner: string;
  #expiresAt: number;
  #released = false;

  constructor(store: SqliteStore, key: string, hash: string, owner: string, fence: string, expiresAt: number) {
    this.#store = store;
    this.key = key;
    this.#hash = hash;
    this.#owner = owner;
    this.fence = fence;
    this.#expiresAt = expiresAt;
  }

  get valid(): boolean {
    return !this.#released && Date.now() < this.#expiresAt;
  }

  get remainingMs(): number {
    return this.valid ? this.#expiresAt - Date.now() : 0;
  }

  renew(): Promise<boolean> {
    if (this.#released) return Promise.resolve(false);
    const expiresAt = this.#store.renew(this.#hash, this.#owner);
    if (expiresAt === undefined) return Promise.resolve(false);
    this.#expiresAt = expiresAt;
    return TRUE;
  }

  release(): Promise<boolean> {
    if (this.#released) return Promise.resolve(false);
    this.#released = true;
    if (this.#store.release(this.#hash, this.#owner)) return TRUE;
    return Promise.reject(new LockError('LEASE_LOST', 'the lease expired or another owner took the key'));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** One SQLite connection and the statements of one backend. */
class SqliteStore {
  readonly settings: Settings;
  #db: DatabaseSync;
  closed = false;

  constructor(settings: Settings) {
    this.settings = settings;
    this.#db = new DatabaseSync(settings.file);
    this.#db.exec(`
      PRAGMA journal_mode = WAL;
      PRAGMA busy_timeout = 5000;
      CREATE TABLE IF NOT EXISTS dokebi_lock (key_hash TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at INTEGER NOT NULL);
      CREATE TABLE IF NOT EXISTS dokebi_lock_fence (key_hash TEXT PRIMARY KEY, fence INTEGER NOT NULL);
    `);
  }

  /** Takes the key in one IMMEDIATE transaction: `{ owner, fence, expiresAt }`, or undefined when held. */
  tryTake(hash: string): { owner: string; fence: string; expiresAt: number } | undefined {
    const now = Date.now();
    const owner = randomBytes(16).toString('hex');
    const expiresAt = now + this.settings.leaseMs;
    this.#db.exec('BEGIN IMMEDIATE');
    try {
      this.#db.prepare('DELETE FROM dokebi_lock WHERE key_hash = ? AND expires_at <= ?').run(hash, now);
      const taken = this.#db.prepare('INSERT OR IGNORE INTO dokebi_lock VALUES (?, ?, ?)').run(hash, owner, expiresAt);
      if (taken.changes === 0) {
        this.#db.exec('COMMIT');
        return undefined;
      }
      const row = this.#db
        .prepare('INSERT INTO dokebi_lock_fence VALUES (?, 1) ON CONFLICT (key_hash) DO UPDATE SET fence = fence + 1 RETURNING fence')
        .get(hash) as { fence: number };
      this.#db.exec('COMMIT');
      return { owner, fence: String(row.fence), expiresAt };
    } catch (error) {
      this.#db.exec('ROLLBACK');
      throw error;
    }
  }

  renew(hash: string, owner: string): number | undefined {
    const expiresAt = Date.now() + this.settings.leaseMs;
    const { changes } = this.#db.prepare('UPDATE dokebi_lock SET expires_at = ? WHERE key_hash = ? AND owner = ? AND expires_at > ?').run(expiresAt, hash, owner, Date.now());
    return changes === 1 ? expiresAt : undefined;
  }

  release(hash: string, owner: string): boolean {
    return this.#db.prepare('DELETE FROM dokebi_lock WHERE key_hash = ? AND owner = ? AND expires_at > ?').run(hash, owner, Date.now()).changes === 1;
  }

  close(): void {
    this.closed = true;
    this.#db.close();
  }
}

/**
 * The backend of one sqlite backend: acquire only. The library adds withLock
 * (renewing these expiring leases while a section runs) and status.
 */
class SqliteBackend implements DriverBackend {
  #store: SqliteStore;

  constructor(store: SqliteStore) {
    this.#store = store;
  }

  async acquire(key: string, options: AcquireOptions = {}): Promise<Lease> {
    if (typeof key !== 'string' || key === '') throw new LockError('INVALID_KEY', 'key must be a non-empty string');
    const store = this.#store;
    const waitMs = options.waitTimeoutMs ?? store.settings.waitTimeoutMs;
    const deadline = Date.now() + waitMs;
    const hash = createHash('sha256').update(key).digest('hex');
    for (;;) {
      if (store.closed) throw new LockError('CLOSED', 'the lock backend is closed');
      if (options.signal?.aborted) throw new LockError('ABORTED', 'the acquire was aborted');
      const taken = store.tryTake(hash);
      if (taken !== undefined) return new SqliteLease(store, key, hash, taken.owner, taken.fence, taken.expiresAt);
      if (waitMs === 0) throw new LockError('LOCK_BUSY', 'the key is held');
      const left = deadline - Date.now();
      if (left <= 0) throw new LockError('WAIT_TIMEOUT', `the key stayed held for ${waitMs} ms`);
      await sleep(Math.min(store.settings.pollIntervalMs, left), undefined, { signal: options.signal }).catch(() => {});
    }
  }
}

/** The driver factory: `export const drivers = { sqlite: sqliteDriver }`. */
export function sqliteDriver(input: DriverInput): LockDriver {
  const store = new SqliteStore(readSettings(input));
  return {
    view: new SqliteBackend(store),
    close: async () => store.close(),
  };
}
