// The benchmark run: every scenario, every subject, each measurement in a
// fresh process, one table per scenario, raw results in results/latest.json.
// Usage: node run.mjs [--smoke] [--only=a,b] [--seconds=S] [--rounds=N]
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { scenarios } from './scenarios/index.mjs';
import { startRedis } from './lib/redis-server.mjs';
import { describeMachine, describeCommit } from './lib/machine.mjs';
import { median } from './lib/stats.mjs';
import { render } from './lib/report.mjs';

const here = fileURLToPath(new URL('.', import.meta.url));
const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const m = /^--([^=]+)(?:=(.*))?$/.exec(a);
    if (!m) throw new Error(`unknown argument ${a}`);
    return [m[1], m[2] ?? true];
  }),
);
const smoke = Boolean(args.smoke);
// Smoke: a fraction of a second per measurement, one round, for CI; the
// figures mean nothing and nothing is compared against a target.
const ctxBase = { smoke, seconds: Number(args.seconds ?? (smoke ? 0.05 : 1)) };
const rounds = Number(args.rounds ?? (smoke ? 1 : 3));
const only = args.only ? String(args.only).split(',') : null;
const selected = scenarios.filter((s) => !only || only.some((o) => s.id.includes(o)));

function runWorker(job, nodeArgs = []) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...nodeArgs, `${here}lib/worker.mjs`, JSON.stringify(job)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    const limit = Math.max(60, job.ctx.seconds * 40) * 1e3;
    const timer = setTimeout(() => child.kill('SIGKILL'), limit);
    child.on('exit', (code, signal) => {
      clearTimeout(timer);
      const line = out.split('\n').findLast((l) => l.startsWith('RESULT '));
      if (code === 0 && line) resolve(JSON.parse(line.slice(7)));
      else reject(new Error(`${job.scenario} / ${job.subjects.join(', ')}: worker failed (${signal ?? `exit ${code}`})\n${out}`));
    });
  });
}

/** The round whose headline figure is the median of the rounds. */
function medianRound(results, scenario) {
  const key = scenario.headline ?? 'opsPerSec';
  const m = median(results.map((r) => r[key]));
  return results.find((r) => r[key] === m) ?? results[0];
}

const machine = describeMachine();
const redis = selected.some((s) => s.needsRedis) ? await startRedis() : null;
const report = { startedAt: new Date().toISOString(), commit: describeCommit(here), smoke, rounds, seconds: ctxBase.seconds, machine, scenarios: [] };
let failed = false;
try {
  console.log(`dokebi-lock benchmarks${smoke ? ' (smoke: figures are not meaningful)' : ''}: ${machine.nproc} cores, ${machine.cpuModel}, Node ${machine.node}, ${machine.redisServer}`);
  for (const scenario of selected) {
    const ctx = { ...ctxBase, redisUrl: redis?.url, outDir: `${here}results` };
    // Work done once per scenario in this process (compiling), passed on.
    ctx.prepared = scenario.prepare ? scenario.prepare(ctx) : undefined;
    const perSubject = new Map(scenario.subjects.map((s) => [s, []]));
    for (let round = 0; round < rounds; round++) {
      // Rotate the order so that no subject always runs first (or last).
      const order = scenario.subjects
        .map((_, i) => scenario.subjects[(i + round) % scenario.subjects.length])
        .filter((subject) => !perSubject.get(subject).some((r) => r.skipped));
      for (const subjects of smoke ? [order] : order.map((s) => [s])) {
        try {
          const results = await runWorker({ scenario: scenario.id, subjects, ctx }, scenario.nodeArgs);
          subjects.forEach((subject, i) => perSubject.get(subject).push(results[i]));
        } catch (error) {
          console.error(error.message);
          failed = true;
          for (const subject of subjects) perSubject.get(subject).push({ skipped: `failed: ${error.message.split('\n')[0]}` });
        }
      }
    }
    const results = scenario.subjects.map((subject) => {
      const all = perSubject.get(subject);
      const measured = all.filter((r) => !r.skipped);
      return measured.length ? { subject, ...medianRound(measured, scenario), rounds: measured } : { subject, ...all[0] };
    });
    const entry = { id: scenario.id, title: scenario.title, unit: scenario.unit, target: scenario.target, results };
    report.scenarios.push(entry);
    console.log('\n' + render(scenario, entry));
  }
} finally {
  await redis?.stop();
}
const dir = `${here}results`;
mkdirSync(dir, { recursive: true });
writeFileSync(`${dir}/latest.json`, JSON.stringify(report, null, 2) + '\n');
writeFileSync(`${dir}/latest.md`, report.scenarios.map((e) => render(scenarios.find((s) => s.id === e.id), e)).join('\n\n') + '\n');
console.log(`\nraw results: ${dir}/latest.json, tables: ${dir}/latest.md`);
if (failed) process.exit(1);
