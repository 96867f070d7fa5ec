// Node, policy driver: what the policy layer adds to an acquire+release of
// the member that serves it (issue 51: at most 3%), measured as the same
// loop on the member directly and through a policy whose default rule names
// that member only. One key, sequential, local and redis.
import { loadDokebi } from '../lib/dokebi.mjs';
import { sequential } from '../lib/measure.mjs';

// Ours is the policy; its one peer is the member it serves, used directly.
const POLICY = 'dokebi-lock';
const DIRECT = 'the member directly (no policy)';
const TARGET = 'at least 0.97x the member directly';

/** A provider with `member` settings as backend `m` and a policy `p` over it; the subject's backend. */
async function open(subject, member, redisUrl) {
  const { mod, version } = await loadDokebi();
  const config = {
    'dokebi-lock': { backends: { m: member, p: { driver: 'policy', default: { backends: ['m'] } } } },
    ...(redisUrl === undefined ? {} : { 'dokebi-redis': { connections: { main: { url: redisUrl } } } }),
  };
  const provider = await mod.openLock({ config });
  const backend = provider.backend(subject === POLICY ? 'p' : 'm');
  return {
    version,
    provider,
    loop: async (keyAt, n) => {
      for (let i = 0; i < n; i++) {
        const lease = await backend.acquire(keyAt());
        await lease.release();
      }
    },
  };
}

function scenario(id, title, member, { redis = false, batch }) {
  return {
    id,
    title,
    unit: 'pairs/s',
    subjects: [POLICY, DIRECT],
    target: TARGET,
    needsRedis: redis,
    note: 'The policy is `{ driver: policy, default: { backends: [m] } }`: a rule lookup, the decision of the core per try, and a lease that says which member served it.',
    async run(subject, ctx) {
      const s = await open(subject, member, redis ? ctx.redisUrl : undefined);
      try {
        const r = await sequential({ loop: s.loop, keyAt: () => 'k', seconds: ctx.seconds, batch: ctx.smoke ? Math.min(batch, 10) : batch });
        return { version: s.version, defaults: member, ...r };
      } finally {
        await s.provider.close();
      }
    },
  };
}

export const scenarios = [
  scenario('node-policy-local', 'Node policy over local: uncontended acquire+release, one key', {}, { batch: 1000 }),
  scenario('node-policy-redis', 'Node policy over redis: sequential acquire+release, one key', { driver: 'redis', connection: 'main', namespace: 'bench-policy', leaseMs: 10000 }, { redis: true, batch: 1 }),
];
