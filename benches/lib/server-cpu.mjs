// The CPU a database server on this host spends per pair, beside this
// process's: what the SQL scenarios (node-postgres, node-mysql) print. Each
// server's reader (lib/postgres-cpu.mjs, lib/mariadb-cpu.mjs) finds its
// processes in /proc and answers `seconds()`, or null where it cannot.
import { readFileSync } from 'node:fs';
import { duration, rate } from './table.mjs';

const TICKS_PER_SECOND = 100; // USER_HZ on Linux

/** utime, stime, cutime, cstime (ticks) and ppid of process `pid`. */
export function procStat(pid) {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The fields after the command name, which may itself hold spaces.
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  const at = (n) => Number(fields[n - 3]);
  return { ppid: at(4), utime: at(14), stime: at(15), cutime: at(16), cstime: at(17) };
}

/** Clock ticks as seconds. */
export const ticksToSeconds = (ticks) => ticks / TICKS_PER_SECOND;

/** The columns of a throughput scenario with both CPU figures. */
export const cpuColumns = [
  { head: 'pairs/s', cell: (r) => rate(r.opsPerSec) },
  { head: 'p50', cell: (r) => duration(r.p50Us) },
  { head: 'p99', cell: (r) => duration(r.p99Us) },
  { head: 'app CPU / pair', cell: (r) => duration(r.appCpuUsPerPair) },
  { head: 'server CPU / pair', cell: (r) => (r.serverCpuUsPerPair === null ? 'n/a' : duration(r.serverCpuUsPerPair)) },
];

/** Runs `timed` (a measurement over subject `s`) between two CPU readings
 *  of this process and of `server` (a reader: `{ seconds() }`). */
export async function withServerCpu(server, s, timed) {
  const serverBefore = server.seconds();
  const appBefore = process.cpuUsage();
  const r = await timed();
  const app = process.cpuUsage(appBefore);
  const serverAfter = server.seconds();
  return {
    ...r,
    version: s.version,
    defaults: s.defaults,
    appCpuUsPerPair: (app.user + app.system) / r.allOps,
    serverCpuUsPerPair: serverBefore === null ? null : ((serverAfter - serverBefore) * 1e6) / r.allOps,
  };
}
