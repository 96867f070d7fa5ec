// Node, mysql driver against GET_LOCK as Node apps use it, on the machine's
// MariaDB or MySQL (BENCH_MYSQL_URL, else mysql://root@127.0.0.1:3306/test):
// sequential pairs on one key, 64 callers on 64 keys, and the hand-off to a
// waiter in another process. Besides the timing, the server's CPU per pair
// (lib/mariadb-cpu.mjs, approximate: the whole server's) and this process's.
import { mysqlSubjects, MYSQL_URL, FLOOR, POOLED, BY_HAND } from './mysql-subjects.mjs';
import { handoffsToProcess, latencyColumns } from './node-handoff.mjs';
import { tasksOnOwnKeys } from './node-redis.mjs';
import { sequential } from '../lib/measure.mjs';
import { mariadbCpu } from '../lib/mariadb-cpu.mjs';
import { cpuColumns as columns, withServerCpu } from '../lib/server-cpu.mjs';

const SUBJECTS = ['dokebi-lock', FLOOR, POOLED];
// Our procedures by hand cannot wait: not in the hand-off.
const PAIR_SUBJECTS = [...SUBJECTS, BY_HAND];
const DURABILITY =
  'Each of our pairs is two transactions (take, give_back), each committed durably: with innodb_flush_log_at_trx_commit=1 (the default) every commit waits for a flush of the redo log, which GET_LOCK (a lock in server memory, no transaction) never does.';

/** Runs `timed` between two CPU readings of this process and of the server. */
const withCpu = async (s, timed) => withServerCpu(await mariadbCpu(MYSQL_URL), s, timed);

/** Runs `fn` over a fresh subject, closed afterwards. */
async function withSubject(subject, fn) {
  const s = await mysqlSubjects[subject](MYSQL_URL);
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

export const scenarios = [
  {
    id: 'node-mysql-sequential-one-key',
    title: 'Node mysql: sequential acquire+release of one key',
    unit: 'pairs/s',
    subjects: PAIR_SUBJECTS,
    needs: ['mysqlTables'],
    target: 'at least 0.9x our procedures by hand (the same CALLs sent by mysql2) (issue 52)',
    note: `The GET_LOCK rows hold a lock in the server's memory, tied to the connection: no expiry, no fence, lost with the connection. ${DURABILITY}`,
    columns,
    run: (subject, ctx) => withSubject(subject, (s) => withCpu(s, () => sequential({ loop: s.loop, keyAt: () => 'k', seconds: ctx.seconds, batch: 1 }))),
  },
  {
    id: 'node-mysql-64-tasks-64-keys',
    title: 'Node mysql: 64 tasks on 64 keys',
    unit: 'pairs/s',
    subjects: PAIR_SUBJECTS,
    needs: ['mysqlTables'],
    target: 'at least 3x GET_LOCK on a pool connection per lock (issue 52)',
    note: `Ours over its pool of 4 connections, by hand over mysql2's pool of 10, GET_LOCK over one connection (statements queued on it) or a pool connection per held lock (10: the other tasks wait for one). ${DURABILITY}`,
    columns,
    run: (subject, ctx) => withSubject(subject, (s) => withCpu(s, () => tasksOnOwnKeys(s, ctx))),
  },
  {
    id: 'node-mysql-handoff',
    title: 'Node mysql: hand-off to a waiter in another process',
    unit: 'latency',
    subjects: SUBJECTS,
    needs: ['mysqlTables'],
    headline: 'p50Us',
    lowerIsBetter: true,
    target: 'median under 2 ms, p99 under 10 ms (issue 52)',
    note: 'Latency: holder calls release() -> the waiting process has the lock. Ours: the give_back commits a row to the release log, the waiter\'s poller (every 1 ms while it waits) reads it, and the waiter\'s take commits: two durable commits. GET_LOCK waits inside the server, which grants at once, nothing written.',
    columns: latencyColumns,
    run: (subject, ctx) =>
      withSubject(subject, (s) => handoffsToProcess(s, { family: 'mysql', subject, argument: MYSQL_URL, key: `handoff:${process.pid}`, ctx, maxMs: 6000 })),
  },
];
