// The app's extension entry (what `dokebi add` created from the template, then
// edited): every backend is wrapped to count acquires and failures per
// backend and code, and the app driver `sqlite` is registered.
import { LockError, LockExtension } from '../../../../../npm/index.js';
import type { AcquireOptions, DriverBackend, Lease, LockBackend, LockDrivers, WrapBackendInput } from '../../../../../npm/index.js';
import { sqliteDriver } from './sqlite-driver.ts';

export const drivers: LockDrivers = { sqlite: sqliteDriver };

type Counts = { acquired: number; failed: Record<string, number> };

/**
 * Process-wide counters by backend name (every provider of the process adds
 * to them): acquired, and failures by LockError code. Never a key.
 */
export const metrics = new Map<string, Counts>();

/**
 * A backend that counts what its inner backend's acquire does. It supplies
 * acquire only: the library adds withLock (built on this acquire, so sections
 * are counted too) and status (the inner backend's).
 */
class MeteredBackend implements DriverBackend {
  #inner: LockBackend;
  #counts: Counts;

  constructor(inner: LockBackend, counts: Counts) {
    this.#inner = inner;
    this.#counts = counts;
  }

  acquire(key: string, options?: AcquireOptions): Promise<Lease> {
    return this.#inner.acquire(key, options).then(
      (lease) => {
        this.#counts.acquired++;
        return lease;
      },
      (error: unknown) => {
        const code = error instanceof LockError ? error.code : 'OTHER';
        this.#counts.failed[code] = (this.#counts.failed[code] ?? 0) + 1;
        throw error;
      },
    );
  }
}

export default class MetricsExtension extends LockExtension {
  protected override wrapBackend({ name, backend }: WrapBackendInput): DriverBackend {
    let counts = metrics.get(name);
    if (counts === undefined) metrics.set(name, (counts = { acquired: 0, failed: {} }));
    return new MeteredBackend(backend, counts);
  }
}
