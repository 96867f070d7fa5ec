// Node, postgres driver against the PostgreSQL locks of npm, on the machine's
// PostgreSQL (BENCH_POSTGRES_URL, else postgres://postgres@127.0.0.1:5432/test):
// sequential pairs on one key, 64 callers on 64 keys, and the hand-off to a
// waiter in another process. Besides the timing, the server's CPU per pair
// (lib/postgres-cpu.mjs) and this process's.
import { postgresSubjects, FLOOR, BY_HAND, LEASE_ROW } from './postgres-subjects.mjs';
import { handoffsToProcess, latencyColumns } from './node-handoff.mjs';
import { tasksOnOwnKeys } from './node-redis.mjs';
import { sequential } from '../lib/measure.mjs';
import { postgresCpu } from '../lib/postgres-cpu.mjs';
import { cpuColumns as columns, withServerCpu } from '../lib/server-cpu.mjs';

const PG_URL = process.env.BENCH_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/test';
const SUBJECTS = ['dokebi-lock', FLOOR, 'advisory-lock'];
// The statements of ours by hand and the lease row cannot wait: not in the hand-off.
const PAIR_SUBJECTS = [...SUBJECTS, BY_HAND, LEASE_ROW];

/** Runs `timed` between two CPU readings of this process and of the server. */
const withCpu = async (s, timed) => withServerCpu(await postgresCpu(PG_URL), s, timed);

/** Runs `fn` over a fresh subject, closed afterwards. */
async function withSubject(subject, fn) {
  const s = await postgresSubjects[subject](PG_URL);
  try {
    return await fn(s);
  } finally {
    await s.close();
  }
}

export const scenarios = [
  {
    id: 'node-postgres-sequential-one-key',
    title: 'Node postgres: sequential acquire+release of one key',
    unit: 'pairs/s',
    subjects: PAIR_SUBJECTS,
    target: 'at least 0.9x our functions by hand (the same statements sent by pg) and at least 4x advisory-lock (issue 37); at least 0.9x a fenced lease row by hand (issue 55)',
    note: 'The floor holds a session advisory lock on a pooled connection: no expiry, no fence, lost with the connection. advisory-lock connects anew for every lock (its design), and that is what its users pay.',
    columns,
    run: (subject, ctx) => withSubject(subject, (s) => withCpu(s, () => sequential({ loop: s.loop, keyAt: () => 'k', seconds: ctx.seconds, batch: 1 }))),
  },
  {
    id: 'node-postgres-64-tasks-64-keys',
    title: 'Node postgres: 64 tasks on 64 keys',
    unit: 'pairs/s',
    subjects: PAIR_SUBJECTS,
    target: 'at least 10x advisory-lock (issue 37); at least 0.9x a fenced lease row by hand over as many connections (issue 55)',
    note: 'Ours over its pool of 2 connections (each pipelines statements), the lease row by hand over a pg.Pool of 2, the floor over pg.Pool\'s 10, advisory-lock over a connection per held lock.',
    columns,
    run: (subject, ctx) => withSubject(subject, (s) => withCpu(s, () => tasksOnOwnKeys(s, ctx))),
  },
  {
    id: 'node-postgres-handoff',
    title: 'Node postgres: hand-off to a waiter in another process',
    unit: 'latency',
    subjects: SUBJECTS,
    headline: 'p50Us',
    lowerIsBetter: true,
    target: 'median under 2 ms, p99 under 10 ms (issue 37)',
    note: 'Latency: holder calls release() -> the waiting process has the lock. Ours wakes the waiter by NOTIFY; the advisory locks wait inside the server (pg_advisory_lock), which grants at once.',
    columns: latencyColumns,
    run: (subject, ctx) =>
      withSubject(subject, (s) => handoffsToProcess(s, { family: 'postgres', subject, argument: PG_URL, key: `handoff:${process.pid}`, ctx, maxMs: 6000 })),
  },
];
