// The machine's MariaDB for the mysql tests, as tests/mysql/mod.rs uses it:
// 127.0.0.1:3306, user root without a password, database test
// (DOKEBI_MYSQL_URL overrides), each test on a table name of its own whose
// tables and procedures are dropped after the test file. SQL from outside
// the driver goes through the server's own client (`mariadb`).
import { after } from 'node:test';
import { execFileSync } from 'node:child_process';

/** The server every mysql test uses. */
export const MYSQL_URL = process.env.DOKEBI_MYSQL_URL || 'mysql://root@127.0.0.1:3306/test';

/** The client's arguments for MYSQL_URL (user, password, host, port, database). */
function clientArgs() {
  const url = new URL(MYSQL_URL);
  const args = ['-h', url.hostname, '-P', url.port || '3306', '-u', decodeURIComponent(url.username)];
  if (url.password !== '') args.push(`-p${decodeURIComponent(url.password)}`);
  return [...args, url.pathname.slice(1)];
}

/** Runs `sql` on the test server; its output (tab-separated, no column names). */
export function mysql(sql) {
  return execFileSync('mariadb', [...clientArgs(), '--batch', '--skip-column-names', '-e', sql], { encoding: 'utf8' }).trim();
}

/** What the driver creates, named after a backend's `table` (as tests/mysql/mod.rs drops them). */
const TABLE_SUFFIXES = ['', '_holders', '_waiting', '_released'];
const PROCEDURE_SUFFIXES = ['_lock', '_try', '_release', '_take', '_renew', '_give_back', '_withdraw', '_hand_over'];

/** Drops the tables and procedures of backend table `table`. */
export function dropTables(table) {
  mysql(
    [
      ...TABLE_SUFFIXES.map((suffix) => `DROP TABLE IF EXISTS \`${table}${suffix}\`;`),
      ...PROCEDURE_SUFFIXES.map((suffix) => `DROP PROCEDURE IF EXISTS \`${table}${suffix}\`;`),
    ].join(''),
  );
}

/**
 * A fresh table name for each call, its tables and procedures all dropped
 * after the calling file's tests (also when they fail).
 */
export function useTables(prefix) {
  const made = [];
  after(() => {
    for (const table of made) dropTables(table);
  });
  return () => {
    const table = `dl_node_${prefix}_${process.pid}_${made.length}`;
    dropTables(table);
    made.push(table);
    return table;
  };
}

/**
 * The `options` map of one mysql backend `my` on `table`: `settings` add to
 * the backend, `connection` to the connection `main`.
 */
export function mysqlConfig(table, settings = {}, { url = MYSQL_URL, connection = {} } = {}) {
  return {
    'dokebi-lock': { backends: { my: { driver: 'mysql', connection: 'main', table, leaseMs: 10_000, ...settings } } },
    // Statements time out below the lease, as the options require.
    'dokebi-mysql': { connections: { main: { url, commandTimeoutMs: Math.min(5000, Math.floor((settings.leaseMs ?? 10_000) * 0.9)), ...connection } } },
  };
}
