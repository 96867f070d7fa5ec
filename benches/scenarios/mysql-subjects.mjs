// The MySQL locks compared in the Node mysql scenarios, each over the
// database at `url` at its documented settings: ours (driver mysql, the
// defaults: a pool of 4 connections, the release log polled every
// millisecond while an acquire is in progress, its tables and procedures
// named after TABLE); the floor: `GET_LOCK` + `RELEASE_LOCK` on one `mysql2`
// connection, which has none of a lease's properties (no expiry, no fence,
// held by the connection, re-entrant within it, so one connection cannot
// keep two callers of this process apart); and `GET_LOCK` the way apps on a
// pool take it (as AdonisJS Lucid and knex users do): a connection of a
// `mysql2` pool (its default of 10) per lock, held until the release. And
// ours by hand: the driver's own `CALL`s of its take and give_back
// procedures (src/mysql/sql.rs), sent by a `mysql2` pool, the duty's own
// cost without the driver; it cannot wait, so it is not in the hand-off
// scenario. Each factory returns { version, defaults, loop(keyAt, n),
// acquire(key) -> Promise<release()>, close() }.
import { createRequire } from 'node:module';
import { randomBytes } from 'node:crypto';
import { openBackend } from '../lib/dokebi.mjs';

const require = createRequire(import.meta.url);
const versionOf = (name) => require(`${name}/package.json`).version;
export const MYSQL_URL = process.env.BENCH_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';
export const LEASE_MS = 10000;
export const FLOOR = 'GET_LOCK + RELEASE_LOCK (one connection)';
export const POOLED = 'GET_LOCK on a pool connection per lock';
export const BY_HAND = 'our procedures by hand (mysql2)';
// The bench's own tables and procedures (see ourTables).
const TABLE = 'dokebi_mysql_bench';
const NAMESPACE = 'bench';
// How long GET_LOCK waits (seconds), as ours waits 10 s in the hand-off.
const GET_LOCK_WAIT_S = 10;

const hex = (text) => Buffer.from(text, 'utf8').toString('hex');
const mysql = () => require('mysql2/promise');

/** Runs `fn` over a fresh `mysql2` connection to `url`. */
async function onOwnConnection(url, fn) {
  const connection = await mysql().createConnection(url);
  try {
    return await fn(connection);
  } finally {
    await connection.end();
  }
}

/** The server's version and commit durability, for the settings notes. */
const serverSettings = (url) =>
  onOwnConnection(url, async (c) => {
    const [[row]] = await c.query({ sql: 'SELECT VERSION(), @@innodb_flush_log_at_trx_commit', rowsAsArray: true });
    return `${row[0]}, innodb_flush_log_at_trx_commit=${row[1]}`;
  });

/** Drops ours' tables and procedures (TABLE and every name it starts). */
const dropTables = (url) =>
  onOwnConnection(url, async (c) => {
    const ours = (name) => name === TABLE || name.startsWith(`${TABLE}_`);
    const [routines] = await c.query({ sql: "SELECT ROUTINE_NAME FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE'", rowsAsArray: true });
    const [tables] = await c.query({ sql: 'SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()', rowsAsArray: true });
    for (const [name] of routines.filter(([name]) => ours(name))) await c.query(`DROP PROCEDURE IF EXISTS \`${name}\``);
    const names = tables.map(([name]) => name).filter(ours);
    if (names.length) await c.query(`DROP TABLE IF EXISTS ${names.map((name) => `\`${name}\``).join(', ')}`);
  });

/** The run's service (benches/run.mjs, `needs: ['mysqlTables']`) that
 *  leaves nothing of ours in the database: what an earlier run left is
 *  dropped before the first mysql scenario, and the tables and procedures
 *  the driver created on first use after the last one. Created once per
 *  run, not per subject: installing them takes 100-300 ms here. */
export async function ourTables() {
  await dropTables(MYSQL_URL);
  return { stop: () => dropTables(MYSQL_URL) };
}

/** `GET_LOCK` of `key` on `connection`, or an error when it timed out. */
async function getLock(connection, key) {
  const name = `dokebi-bench:${key}`;
  const [[row]] = await connection.query({ sql: 'SELECT GET_LOCK(?, ?)', values: [name, GET_LOCK_WAIT_S], rowsAsArray: true });
  if (row[0] !== 1) throw new Error(`GET_LOCK(${key}) answered ${row[0]}`);
  return () => connection.query('SELECT RELEASE_LOCK(?)', [name]);
}

/** The subject's loop: n pairs, each awaited in turn. */
const loopOf = (take) => async (keyAt, n) => {
  for (let i = 0; i < n; i++) await (await take(keyAt()))();
};

export const mysqlSubjects = {
  async 'dokebi-lock'(url) {
    const settings = { driver: 'mysql', connection: 'main', namespace: NAMESPACE, table: TABLE, leaseMs: LEASE_MS };
    const { provider, backend, version } = await openBackend(settings, url, 'dokebi-mysql');
    // The driver creates its tables and procedures on first use.
    await (await backend.acquire('bench:setup')).release();
    return {
      version,
      defaults: { leaseMs: LEASE_MS, poolSize: '4 (default)', notifyPollIntervalMs: '250 (default)', table: TABLE, server: await serverSettings(url) },
      loop: loopOf(async (key) => {
        const lease = await backend.acquire(key);
        return () => lease.release();
      }),
      acquire: async (key) => {
        const lease = await backend.acquire(key, { waitTimeoutMs: 10000 });
        return () => lease.release();
      },
      close: () => provider.close(),
    };
  },

  async [FLOOR](url) {
    const connection = await mysql().createConnection(url);
    const take = (key) => getLock(connection, key);
    return {
      version: `mysql2 ${versionOf('mysql2')}`,
      defaults: { connection: 'one mysql2 connection (statements queued on it)', lock: 'GET_LOCK(name, 10), held by the connection until RELEASE_LOCK' },
      loop: loopOf(take),
      acquire: take,
      close: () => connection.end(),
    };
  },

  async [POOLED](url) {
    const pool = mysql().createPool(url);
    const take = async (key) => {
      const connection = await pool.getConnection();
      let release;
      try {
        release = await getLock(connection, key);
      } catch (error) {
        connection.destroy();
        throw error;
      }
      return async () => {
        try {
          await release();
        } finally {
          connection.release();
        }
      };
    };
    return {
      version: `mysql2 ${versionOf('mysql2')}`,
      defaults: { pool: 'mysql2 createPool, connectionLimit 10 (default)', lock: 'GET_LOCK(name, 10) on a pool connection, the connection held until RELEASE_LOCK' },
      loop: loopOf(take),
      acquire: take,
      close: () => pool.end(),
    };
  },

  async [BY_HAND](url) {
    // Ours opened first, so that the tables and procedures exist.
    await (await mysqlSubjects['dokebi-lock'](url)).close();
    const pool = mysql().createPool(url);
    const namespace = hex(NAMESPACE);
    // As the driver's first try at its defaults (src/mysql/sql.rs): a plain
    // lease of one key, a mark left for 1.5 s when refused (2 x
    // notifyPollIntervalMs + 1 s), no ticket, the default retention
    // (10 min), row-lock waits of 1 s (3/4 of commandTimeoutMs 2000).
    const TAKE = (key, token) => `CALL \`${TABLE}_take\`(X'${namespace}', '${hex(key)}', '${token}', 0, 1, 1, ${LEASE_MS}, 1500, 0, 600000, 1, 1)`;
    const GIVE_BACK = (key, token) => `CALL \`${TABLE}_give_back\`(X'${namespace}', '${hex(key)}', '${token}', 0, 1)`;
    const take = async (key) => {
      const token = randomBytes(16).toString('hex');
      const [results] = await pool.query({ sql: TAKE(key, token), rowsAsArray: true });
      // A CALL answers its result set, then a status: the first row's column.
      const answer = results[0][0][0];
      if (!answer.startsWith('1,')) throw new Error(`${key} is held: ${answer}`);
      return () => pool.query(GIVE_BACK(key, token));
    };
    return {
      version: `mysql2 ${versionOf('mysql2')}`,
      defaults: { pool: 'mysql2 createPool, connectionLimit 10 (default)', statements: 'our take and give_back procedures, one CALL each, as text, as the driver sends them' },
      loop: loopOf(take),
      acquire: take,
      close: () => pool.end(),
    };
  },
};
