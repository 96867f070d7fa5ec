// Node, local driver against the in-process peers: uncontended pairs on one
// key and on fresh keys, and 64 callers on one key and on 64 keys; then the
// same through each library's run-this-locked call (ours withLock).
import { localSubjects } from './local-subjects.mjs';
import { sequential, concurrent } from '../lib/measure.mjs';

const SUBJECTS = ['dokebi-lock', 'async-lock', 'async-mutex', 'navigator.locks', 'plain-JS Map lock'];
const TARGET = 'at least async-lock, and at least 0.9x the plain-JS Map lock (the floor of a keyed lock)';
const TASKS = 64;

async function open(subject, keyed) {
  return localSubjects[subject](subject === 'dokebi-lock' ? {} : { keyed });
}

/** The subject's acquire+release loop, or its section loop (withLock and the like). */
const pairs = (s) => s.loop;
const sections = (s) => s.section;
// The uncontended pair is also measured against the Map lock calling across
// Node-API once per acquire: the floor for a lock whose state stays in Rust.
const PAIR = {
  subjects: [...SUBJECTS, 'plain-JS Map lock + 1 native call'],
  note: '"plain-JS Map lock + 1 native call" is the Map lock calling the addon\'s cheapest Node-API function (takeError, nothing pending) once per acquire: the least a lock whose state lives in Rust pays per pair.',
};
const SECTION = {
  loopOf: sections,
  note: 'Each library runs an empty synchronous function under the lock: ours `withLock(key, fn)`, async-lock `acquire(key, fn)`, async-mutex `runExclusive(fn)`, navigator.locks `request(key, fn)`, the plain-JS Map lock acquire, `try`/`finally`, release.',
};

function sequentialScenario(id, title, keyed, makeKeyAt, { unit = 'pairs/s', loopOf = pairs, note, subjects = SUBJECTS } = {}) {
  return {
    id,
    title,
    unit,
    note,
    subjects,
    target: TARGET,
    async run(subject, ctx) {
      const s = await open(subject, keyed);
      if (s.skipped) return s;
      const r = await sequential({ loop: loopOf(s), keyAt: makeKeyAt(), seconds: ctx.seconds, batch: ctx.smoke ? 100 : 1000 });
      return { version: s.version, defaults: s.defaults, ...r };
    },
  };
}

function concurrentScenario(id, title, keyed, keyOfTask, { unit = 'handoffs/s', loopOf = pairs, note } = {}) {
  return {
    id,
    title,
    unit,
    note,
    subjects: SUBJECTS,
    target: TARGET,
    async run(subject, ctx) {
      const s = await open(subject, keyed);
      if (s.skipped) return s;
      const r = await concurrent({
        loop: loopOf(s),
        keyAtFor: (i) => {
          const key = keyOfTask(i);
          return () => key;
        },
        tasks: TASKS,
        seconds: ctx.seconds,
        batch: 16,
      });
      return { version: s.version, defaults: s.defaults, ...r };
    },
  };
}

export const scenarios = [
  sequentialScenario('node-local-one-key', 'Node local: uncontended acquire+release, one key', false, () => () => 'k', PAIR),
  sequentialScenario(
    'node-local-fresh-keys',
    'Node local: uncontended acquire+release, a fresh key each time',
    true,
    () => {
      let n = 0;
      return () => 'key:' + n++;
    },
    PAIR,
  ),
  concurrentScenario('node-local-64-tasks-one-key', 'Node local: 64 tasks on one key (every pair is a hand-off)', false, () => 'k'),
  concurrentScenario('node-local-64-tasks-64-keys', 'Node local: 64 tasks on 64 keys (one key per task, no waiting)', true, (i) => 'key:' + i, { unit: 'pairs/s' }),
  sequentialScenario('node-local-section-one-key', 'Node local: uncontended withLock (empty section), one key', false, () => () => 'k', { ...SECTION, unit: 'sections/s' }),
  concurrentScenario('node-local-section-64-tasks-one-key', 'Node local: withLock, 64 tasks on one key (every section waits for a hand-off)', false, () => 'k', SECTION),
  concurrentScenario('node-local-section-64-tasks-64-keys', 'Node local: withLock, 64 tasks on 64 keys (one key per task, no waiting)', true, (i) => 'key:' + i, { ...SECTION, unit: 'sections/s' }),
];
