// Node, file driver against the file locks of npm (processes of one host):
// sequential acquire+release pairs on one key, then the hand-off between two
// processes (the holder releases while a waiter in a forked process waits;
// latency from just before release() to the waiter holding the lock, both
// on CLOCK_MONOTONIC).
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { fileSubjects } from './file-subjects.mjs';
import { handoffsToProcess, latencyColumns } from './node-handoff.mjs';
import { mailbox } from '../lib/ipc.mjs';
import { sequential } from '../lib/measure.mjs';
import { rate } from '../lib/table.mjs';

const SUBJECTS = ['dokebi-lock', 'proper-lockfile', 'lockfile', 'fs-ext'];
const WORKER = fileURLToPath(new URL('./file-worker.mjs', import.meta.url));
const PROCESSES = 4;
const TASKS = 16;
const KEYS = 64;

/** Pairs per second of PROCESSES processes of TASKS tasks each on KEYS
 *  keys for `seconds`, all on `dir`. */
async function processesOnKeys(subject, dir, seconds) {
  const ms = Math.round(seconds * 1e3);
  const started = performance.now();
  const workers = Array.from({ length: PROCESSES }, () => fork(WORKER, [subject, JSON.stringify(dir), TASKS, KEYS, ms], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] }));
  const counts = await Promise.all(workers.map((worker) => mailbox(worker).next('done')));
  const elapsedS = (performance.now() - started) / 1e3;
  const pairs = counts.reduce((sum, { pairs }) => sum + pairs, 0);
  return { pairs, elapsedS, opsPerSec: pairs / elapsedS };
}

/** A fresh directory for one subject's lock files, removed after `fn`. */
async function inDirectory(fn) {
  const dir = mkdtempSync(join(tmpdir(), 'dokebi-bench-file-'));
  try {
    return await fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export const scenarios = [
  {
    id: 'node-file-sequential',
    title: 'Node file: sequential acquire+release on one key',
    unit: 'pairs/s',
    subjects: SUBJECTS,
    target: 'at least 10x proper-lockfile',
    note: 'Each library at its documented defaults, its lock files in a fresh directory under the system temporary directory.',
    run: (subject, ctx) =>
      inDirectory(async (dir) => {
        const s = await fileSubjects[subject](dir);
        try {
          const r = await sequential({ loop: s.loop, keyAt: () => 'k', seconds: ctx.seconds, batch: ctx.smoke ? 20 : 200 });
          return { version: s.version, defaults: s.defaults, ...r };
        } finally {
          await s.close();
        }
      }),
  },
  {
    id: 'node-file-processes',
    title: `Node file: ${PROCESSES} processes x ${TASKS} tasks on ${KEYS} keys`,
    unit: 'pairs/s',
    subjects: SUBJECTS,
    target: 'printed with the same peers (issue 38 sets no figure)',
    note: 'Each task takes a random key of the 64, waiting as the subject offers (see defaults.wait), and releases it at once; pairs/s of all processes together, over the whole run of the processes (their start included).',
    columns: [
      { head: 'pairs/s', cell: (r) => rate(r.opsPerSec) },
      { head: 'pairs', cell: (r) => String(r.pairs) },
    ],
    run: (subject, ctx) =>
      inDirectory(async (dir) => {
        const s = await fileSubjects[subject](dir);
        await s.close();
        return { version: s.version, defaults: s.defaults, ...(await processesOnKeys(subject, dir, ctx.smoke ? 0.2 : ctx.seconds)) };
      }),
  },
  {
    id: 'node-file-handoff',
    title: 'Node file: hand-off to a waiter in another process',
    unit: 'latency',
    subjects: SUBJECTS,
    headline: 'p50Us',
    lowerIsBetter: true,
    target: 'median under 0.5 ms, p99 under 5 ms',
    note: 'Latency: holder calls release() -> the waiting process has the lock. The peers wait the way their documentation offers (see defaults.wait): proper-lockfile and lockfile poll; fs-ext blocks a thread of libuv\'s pool in flock, which the kernel wakes.',
    columns: latencyColumns,
    run: (subject, ctx) =>
      inDirectory(async (dir) => {
        const s = await fileSubjects[subject](dir);
        try {
          return await handoffsToProcess(s, { family: 'file', subject, argument: dir, key: 'handoff', ctx, maxMs: 8000 });
        } finally {
          await s.close();
        }
      }),
  },
];
