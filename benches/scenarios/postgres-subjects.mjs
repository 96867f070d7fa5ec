// The PostgreSQL locks compared in the Node postgres scenarios, each over the
// database at `url` at its documented settings: ours (driver postgres, the
// defaults: a pool of 2 connections, LISTEN wake-ups, its tables in a schema
// of their own), advisory-lock 2.0.0 (npm's most used one: a new connection
// per lock() and a session `pg_advisory_lock` on it), and the floor: a
// session `pg_advisory_lock` + `pg_advisory_unlock` on a client of a `pg`
// Pool (its default of 10 connections), which has none of a lease's
// properties (no expiry, no fence, held by the connection, re-entrant within
// it). Each factory returns { version, defaults, loop(keyAt, n),
// acquire(key) -> Promise<release()>, close() }.
import { createRequire } from 'node:module';
import { createHash } from 'node:crypto';
import { openBackend } from '../lib/dokebi.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;
export const LEASE_MS = 10000;
export const FLOOR = 'pg advisory lock + unlock';

/** A 64-bit advisory lock key for `name`, as a decimal string (pg passes it
 *  as a bigint parameter). */
const advisoryKey = (name) => createHash('sha256').update(name).digest().readBigInt64LE(0).toString();

export const postgresSubjects = {
  async 'dokebi-lock'(url) {
    const { provider, backend, version } = await openBackend({ driver: 'postgres', connection: 'main', namespace: 'bench', schema: 'dokebi_bench', leaseMs: LEASE_MS }, url, 'dokebi-postgres');
    return {
      version,
      defaults: { leaseMs: LEASE_MS, poolSize: '2 (default)', notifyPollIntervalMs: '250 (default)', schema: 'dokebi_bench' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await (await backend.acquire(keyAt())).release();
      },
      acquire: async (key) => {
        const lease = await backend.acquire(key, { waitTimeoutMs: 10000 });
        return () => lease.release();
      },
      close: () => provider.close(),
    };
  },

  async 'advisory-lock'(url) {
    const createMutex = require('advisory-lock').default(url);
    const take = (key) => createMutex(key).lock();
    return {
      version: versionOf('advisory-lock'),
      defaults: { connection: 'a new pg.Client per lock() (its design)', wait: 'pg_advisory_lock (the server wakes the waiter)' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await (await take(keyAt()))();
      },
      acquire: take,
      close: async () => {},
    };
  },

  async [FLOOR](url) {
    const { Pool } = require('pg');
    const pool = new Pool({ connectionString: url });
    const take = async (key) => {
      const client = await pool.connect();
      const id = advisoryKey(key);
      try {
        await client.query('SELECT pg_advisory_lock($1)', [id]);
      } catch (error) {
        client.release(error);
        throw error;
      }
      return async () => {
        try {
          await client.query('SELECT pg_advisory_unlock($1)', [id]);
        } finally {
          client.release();
        }
      };
    };
    return {
      version: `pg ${versionOf('pg')}`,
      defaults: { pool: 'pg.Pool, max 10 (default)', lock: 'session pg_advisory_lock on a pooled client, held until unlock' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await (await take(keyAt()))();
      },
      acquire: take,
      close: () => pool.end(),
    };
  },
};
