// CPU time of a MariaDB (or MySQL) server on this host, as lib/postgres-cpu.mjs
// reads a PostgreSQL server's. mariadbd is one process: a thread per
// connection and InnoDB's own threads (log writer, purge, page cleaner), all
// counted in its /proc/<pid>/stat. It is found through the server's own
// pid_file (@@pid_file, the path the server wrote), checked against
// /proc/<pid>/comm; elsewhere (another host, a pid file this user cannot
// read) `seconds()` resolves to null.
//
// Approximate, more than postgres's: the figure is the whole server's, so
// it counts other clients of the same server during the measurement (on a
// shared machine, other users' tests), and InnoDB's background work for the
// measured transactions (purge, page flushing) lands partly after the second
// reading. Clock ticks are 10 ms: a measurement of a second or more is needed
// for a per-pair figure to mean anything.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { procStat, ticksToSeconds } from './server-cpu.mjs';

const require = createRequire(import.meta.url);
const SERVER_NAMES = ['mariadbd', 'mysqld'];

/** The server's pid, or null. */
async function serverPidOf(url) {
  const mysql = require('mysql2/promise');
  const connection = await mysql.createConnection(url);
  try {
    const [[row]] = await connection.query({ sql: 'SELECT @@pid_file', rowsAsArray: true });
    const pid = Number(readFileSync(row[0], 'utf8').trim());
    const comm = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    return SERVER_NAMES.includes(comm) ? pid : null;
  } catch {
    return null;
  } finally {
    await connection.end();
  }
}

/** { seconds() -> CPU seconds of the server so far, or null }. */
export async function mariadbCpu(url) {
  const pid = await serverPidOf(url).catch(() => null);
  return {
    seconds() {
      if (pid === null) return null;
      const { utime, stime } = procStat(pid);
      return ticksToSeconds(utime + stime);
    },
  };
}
