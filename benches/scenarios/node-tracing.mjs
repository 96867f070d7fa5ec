// Node local: what the tracing channels (dokebi-lock:acquire, :with-lock,
// :hold) cost. Ours with nobody subscribed, ours with a subscriber (empty
// handlers on every event of the three channels: the cost of the context
// objects, clock reads and publishes, not of any tracer), and async-lock as
// the peer, in the same run; each row ÷ the unsubscribed one.
import { tracingChannel } from 'node:diagnostics_channel';
import { localSubjects } from './local-subjects.mjs';
import { sequential, concurrent } from '../lib/measure.mjs';

const QUIET = 'dokebi-lock, nobody subscribed';
const TRACED = 'dokebi-lock, a tracing subscriber';
const PEER = 'async-lock';
const TASKS = 64;

const noop = () => {};
const HANDLERS = { start: noop, end: noop, asyncStart: noop, asyncEnd: noop, error: noop };
const CHANNELS = ['acquire', 'with-lock', 'hold'].map((name) => tracingChannel(`dokebi-lock:${name}`));

/** Runs `measure(subject)` with the subscriber attached for TRACED only (smoke runs every subject in one process). */
async function withSubscriber(subject, measure) {
  const traced = subject === TRACED;
  if (traced) for (const channel of CHANNELS) channel.subscribe(HANDLERS);
  try {
    return await measure();
  } finally {
    if (traced) for (const channel of CHANNELS) channel.unsubscribe(HANDLERS);
  }
}

function scenario(id, title, unit, loopOf, contended) {
  return {
    id,
    title,
    unit,
    subjects: [QUIET, TRACED, PEER],
    reference: QUIET,
    ratioHead: '÷ nobody subscribed',
    target: 'nobody subscribed costs nothing measurable (compare the row of node-local-one-key); a subscriber costs what it says',
    note: 'Each subscriber handler is empty. Subscribing changes only what ours does; async-lock is there for scale.',
    async run(subject, ctx) {
      const s = await localSubjects[subject === PEER ? PEER : 'dokebi-lock']();
      const r = await withSubscriber(subject, () =>
        contended
          ? concurrent({ loop: loopOf(s), keyAtFor: () => () => 'k', tasks: TASKS, seconds: ctx.seconds, batch: 16 })
          : sequential({ loop: loopOf(s), keyAt: () => 'k', seconds: ctx.seconds, batch: ctx.smoke ? 100 : 1000 }),
      );
      return { version: s.version, defaults: s.defaults, ...r };
    },
  };
}

export const scenarios = [
  scenario('node-local-tracing-one-key', 'Node local tracing: uncontended acquire+release, one key, with and without a subscriber', 'pairs/s', (s) => s.loop, false),
  scenario('node-local-tracing-section', 'Node local tracing: uncontended withLock (empty section), one key, with and without a subscriber', 'sections/s', (s) => s.section, false),
  scenario('node-local-tracing-64-tasks', 'Node local tracing: 64 tasks on one key (every pair is a hand-off), with and without a subscriber', 'handoffs/s', (s) => s.loop, true),
];
