// The machine's PostgreSQL for the postgres tests, as tests/postgres/mod.rs
// uses it: 127.0.0.1:5432, user postgres, database test, trust auth
// (DOKEBI_PG_URL overrides), each test in a schema of its own, dropped with
// everything in it after the test file. SQL from outside the driver goes
// through psql, the server's own client.
import { after } from 'node:test';
import { execFileSync } from 'node:child_process';

/** The server every postgres test uses. */
export const PG_URL = process.env.DOKEBI_PG_URL || 'postgres://postgres@127.0.0.1:5432/test';

/** Runs `sql` on the test server through psql; its output (unaligned, tuples only). */
export function psql(sql) {
  // Warnings only: a DROP ... CASCADE would list every object it drops.
  const env = { ...process.env, PGOPTIONS: '-c client_min_messages=warning' };
  return execFileSync('psql', [PG_URL, '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1', '-c', sql], { encoding: 'utf8', env }).trim();
}

/**
 * A fresh schema name for each call, all dropped after the calling file's
 * tests (also when they fail).
 */
export function useSchemas(prefix) {
  const made = [];
  after(() => {
    for (const schema of made) psql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  });
  return () => {
    const schema = `dl_node_${prefix}_${process.pid}_${made.length}`;
    psql(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    made.push(schema);
    return schema;
  };
}

/**
 * The `options` map of one postgres backend `pg` in `schema`: `settings`
 * add to the backend, `connection` to the connection `main`.
 */
export function postgresConfig(schema, settings = {}, { url = PG_URL, connection = {} } = {}) {
  return {
    'dokebi-lock': { backends: { pg: { driver: 'postgres', connection: 'main', schema, leaseMs: 10_000, ...settings } } },
    // Statements time out below the lease, as the options require.
    'dokebi-postgres': { connections: { main: { url, commandTimeoutMs: Math.min(2000, Math.floor((settings.leaseMs ?? 10_000) * 0.9)), ...connection } } },
  };
}
