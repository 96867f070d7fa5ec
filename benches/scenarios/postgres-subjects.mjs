// The PostgreSQL locks compared in the Node postgres scenarios, each over the
// database at `url` at its documented settings: ours (driver postgres, the
// defaults: a pool of 2 connections, LISTEN wake-ups, its tables in a schema
// of their own), advisory-lock 2.0.0 (npm's most used one: a new connection
// per lock() and a session `pg_advisory_lock` on it), and the floor: a
// session `pg_advisory_lock` + `pg_advisory_unlock` on a client of a `pg`
// Pool (its default of 10 connections), which has none of a lease's
// properties (no expiry, no fence, held by the connection, re-entrant within
// it). And ours by hand: the statements our driver sends (its take and
// give_back functions, in the schema the driver created) sent by a `pg` Pool,
// the duty's own cost without the driver (issue 37's "raw floor of the same
// duty"); it cannot wait, so it is not in the hand-off scenario. And what a
// user writes by hand for a fenced lease (issue 55): one row per key with an
// owner, an expiry on the server's clock and a fence, taken by one INSERT ...
// ON CONFLICT DO UPDATE ... WHERE expired and given back by an owner-checked
// DELETE (LEASE_ROW, below), over a pg Pool of our default pool size (2); it
// cannot wait either. Each factory returns { version, defaults, loop(keyAt, n), acquire(key) ->
// Promise<release()>, close() }.
import { createRequire } from 'node:module';
import { createHash, randomBytes } from 'node:crypto';
import { openBackend } from '../lib/dokebi.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;
export const LEASE_MS = 10000;
export const FLOOR = 'pg advisory lock + unlock';
export const BY_HAND = 'our functions by hand (pg)';
export const LEASE_ROW = 'a fenced lease row by hand (pg)';
/** The lease row's pool: as many connections as ours has by default. */
const LEASE_ROW_POOL = 2;
const SCHEMA = 'dokebi_bench';

/** A 64-bit advisory lock key for `name`, as a decimal string (pg passes it
 *  as a bigint parameter). */
const advisoryKey = (name) => createHash('sha256').update(name).digest().readBigInt64LE(0).toString();

/** VACUUM of the driver's tables: each subject starts from the same tables
 *  whatever ran before it. Since functions 5 a grant and a release update a
 *  key's holder row in place (HOT updates, pruned in the page), so few dead
 *  rows are left to vacuum; functions 4 inserted a holder row per grant and
 *  deleted it on release, and give_back took 1.0 ms of server time with 15k
 *  of them, 0.27 ms after a VACUUM. */
async function vacuumTables(url) {
  const { Client } = require('pg');
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`VACUUM "${SCHEMA}"."dokebi_lock", "${SCHEMA}"."dokebi_lock_holders", "${SCHEMA}"."dokebi_lock_waiting"`);
  } finally {
    await client.end();
  }
}

export const postgresSubjects = {
  async 'dokebi-lock'(url) {
    const { provider, backend, version } = await openBackend({ driver: 'postgres', connection: 'main', namespace: 'bench', schema: SCHEMA, leaseMs: LEASE_MS }, url, 'dokebi-postgres');
    // The driver creates its tables on first use.
    await (await backend.acquire('bench:setup')).release();
    await vacuumTables(url);
    return {
      version,
      defaults: { leaseMs: LEASE_MS, poolSize: '2 (default)', notifyPollIntervalMs: '250 (default)', schema: SCHEMA },
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

  async [BY_HAND](url) {
    // The driver creates its tables and functions on first use: ours
    // opened first, so that they exist (and are vacuumed).
    await (await postgresSubjects['dokebi-lock'](url)).close();
    const { Pool } = require('pg');
    const pool = new Pool({ connectionString: url });
    const fn = (name) => `"${SCHEMA}"."dokebi_lock_${name}"`;
    // As the driver's first try: a plain lease, a mark left for 2 s when
    // refused, the default retention (10 min) and lock timeout (commandTimeoutMs).
    const TAKE = `SELECT ${fn('take')}($1, ARRAY[$2], $3, false, 1, 1, ${LEASE_MS}, 2000, 0, 600000, 5000) AS r`;
    const GIVE_BACK = `SELECT ${fn('give_back')}($1, ARRAY[$2], $3, $4, false)`;
    const take = async (key) => {
      const token = randomBytes(16).toString('hex');
      const { rows } = await pool.query(TAKE, ['bench', key, token]);
      if (rows[0].r[0] !== '1') throw new Error(`${key} is held: ${rows[0].r}`);
      return () => pool.query(GIVE_BACK, ['bench', key, token, `${SCHEMA}.dokebi_lock`]);
    };
    return {
      version: `pg ${versionOf('pg')}`,
      defaults: { pool: 'pg.Pool, max 10 (default)', statements: 'our take and give_back functions, one statement each, as the driver sends them' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await (await take(keyAt()))();
      },
      acquire: take,
      close: () => pool.end(),
    };
  },

  async [LEASE_ROW](url) {
    const { Pool } = require('pg');
    const pool = new Pool({ connectionString: url, max: LEASE_ROW_POOL });
    const table = `"${SCHEMA}"."hand_lease"`;
    await pool.query(`CREATE SCHEMA IF NOT EXISTS "${SCHEMA}"`);
    await pool.query(`CREATE TABLE IF NOT EXISTS ${table} (name text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL, fence bigint NOT NULL)`);
    await pool.query(`TRUNCATE ${table}`);
    await pool.query(`VACUUM ${table}`);
    // The fence: the server's clock in microseconds, or one above the last
    // while its row lives (so it never repeats while the clock goes forward).
    const TAKE = `INSERT INTO ${table} AS l (name, owner, expires_at, fence)
      VALUES ($1, $2, now() + make_interval(secs => ${LEASE_MS / 1000}), (extract(epoch FROM now()) * 1000000)::bigint)
      ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, fence = greatest(l.fence + 1, EXCLUDED.fence)
      WHERE l.expires_at <= now()
      RETURNING fence`;
    const GIVE_BACK = `DELETE FROM ${table} WHERE name = $1 AND owner = $2`;
    const take = async (key) => {
      const token = randomBytes(16).toString('hex');
      const { rowCount } = await pool.query(TAKE, [key, token]);
      if (rowCount !== 1) throw new Error(`${key} is held`);
      return () => pool.query(GIVE_BACK, [key, token]);
    };
    return {
      version: `pg ${versionOf('pg')}`,
      defaults: { pool: `pg.Pool, max ${LEASE_ROW_POOL} (ours' default)`, statements: 'INSERT ... ON CONFLICT DO UPDATE ... WHERE expired RETURNING fence; DELETE ... WHERE owner' },
      loop: async (keyAt, n) => {
        for (let i = 0; i < n; i++) await (await take(keyAt()))();
      },
      acquire: take,
      close: () => pool.end(),
    };
  },
};
