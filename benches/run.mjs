// The benchmark run: every scenario, every subject, each measurement in a
// fresh process, one table per scenario, raw results in results/latest.json.
// Usage: node run.mjs [--smoke] [--only=a,b] [--seconds=S] [--rounds=N] [--pin]
// --pin: the Node processes on core 0, every redis-server on core 1 (lib/pin.mjs).
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { scenarios } from './scenarios/index.mjs';
import { startRedis } from './lib/redis-server.mjs';
import { startCluster } from './lib/redis-cluster.mjs';
import { startReplicated } from './lib/redis-replicated.mjs';
import { startSentinel } from './lib/redis-sentinel.mjs';
import { ourTables } from './scenarios/mysql-subjects.mjs';
import { pinned, mode, runPinned, checkPinned, APP_CORE } from './lib/pin.mjs';
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
// --pin: the run again under taskset (where `pinned` is set), its status ours.
if (args.pin && !pinned) process.exit(await runPinned());
checkPinned('the benchmark run', process.pid, APP_CORE);
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

// Servers a scenario names in `needs`, besides the run's redis-server: each
// started before the first selected scenario that needs it and stopped after
// the last one, so that six idle cluster nodes do not run beside the other
// measurements; and the mysql scenarios' tables in the machine's database,
// dropped after the last. One that fails to start fails its scenarios, not
// the run.
const SERVICES = { cluster: startCluster, replicated: startReplicated, sentinel: startSentinel, mysqlTables: ourTables };
const services = new Map(); // name -> { service } or { error }

/** The data (URLs) of the services `scenario` needs, started if need be. */
async function servicesFor(scenario) {
  const data = {};
  for (const name of scenario.needs ?? []) {
    if (!services.has(name)) services.set(name, await SERVICES[name]().then((service) => ({ service }), (error) => ({ error })));
    const { service, error } = services.get(name);
    if (error) throw error;
    const { stop, ...urls } = service;
    data[name] = urls;
  }
  return data;
}

/** Stops the services no scenario after selected[index] needs. */
async function stopServicesAfter(index) {
  for (const [name, { service }] of services) {
    if (service && !selected.slice(index + 1).some((s) => s.needs?.includes(name))) {
      services.delete(name);
      await service.stop();
    }
  }
}

const machine = describeMachine();
const redis = selected.some((s) => s.needsRedis) ? await startRedis() : null;
const report = { startedAt: new Date().toISOString(), commit: describeCommit(here), smoke, rounds, seconds: ctxBase.seconds, mode, machine, scenarios: [] };
let failed = false;
try {
  console.log(`dokebi-lock benchmarks${smoke ? ' (smoke: figures are not meaningful)' : ''}: ${machine.nproc} cores, ${machine.cpuModel}, Node ${machine.node}, ${machine.redisServer}; ${mode}`);
  for (const [index, scenario] of selected.entries()) {
    let ctx;
    try {
      ctx = { ...ctxBase, redisUrl: redis?.url, outDir: `${here}results`, ...(await servicesFor(scenario)) };
    } catch (error) {
      console.error(`${scenario.id}: ${error.message}`);
      failed = true;
      const why = `failed: ${error.message.split('\n')[0]}`;
      const entry = { id: scenario.id, title: scenario.title, unit: scenario.unit, target: scenario.target, mode, results: scenario.subjects.map((subject) => ({ subject, skipped: why })) };
      report.scenarios.push(entry);
      console.log('\n' + render(scenario, entry));
      await stopServicesAfter(index);
      continue;
    }
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
    await stopServicesAfter(index);
    const results = scenario.subjects.map((subject) => {
      const all = perSubject.get(subject);
      const measured = all.filter((r) => !r.skipped);
      return measured.length ? { subject, ...medianRound(measured, scenario), rounds: measured } : { subject, ...all[0] };
    });
    const entry = { id: scenario.id, title: scenario.title, unit: scenario.unit, target: scenario.target, mode, results };
    report.scenarios.push(entry);
    console.log('\n' + render(scenario, entry));
  }
} finally {
  await Promise.all([redis?.stop(), ...[...services.values()].map((s) => s.service?.stop())]);
}
const dir = `${here}results`;
mkdirSync(dir, { recursive: true });
writeFileSync(`${dir}/latest.json`, JSON.stringify(report, null, 2) + '\n');
writeFileSync(`${dir}/latest.md`, report.scenarios.map((e) => render(scenarios.find((s) => s.id === e.id), e)).join('\n\n') + '\n');
console.log(`\nraw results: ${dir}/latest.json, tables: ${dir}/latest.md`);
if (failed) process.exit(1);
