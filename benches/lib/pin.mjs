// The pinned mode (run.mjs --pin): the app's Node processes on one core and
// every redis-server on another, as in a container with a 1-CPU limit beside
// its Redis. Without pinning, work that leaves the JS thread (a driver thread,
// a thread pool) runs on a second core for free, which hides what it costs an
// app that has one core. The run re-executes itself under `taskset -c 0`, so
// that every process it starts (workers, hand-off waiters) and every thread
// they start inherit core 0; redis-servers are started under `taskset -c 1`.
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';

export const APP_CORE = 0;
export const SERVER_CORE = 1;
// Set in the re-executed run; the processes it starts inherit it.
const PINNED_ENV = 'DOKEBI_BENCH_PINNED';

export const pinned = process.env[PINNED_ENV] === '1';

export const mode = pinned
  ? `pinned: Node processes on core ${APP_CORE}, redis-servers on core ${SERVER_CORE} (taskset)`
  : 'unpinned: every process free to use every core';

/** The CPUs process `pid` may run on, as the kernel lists them ("0", "0-1"). */
export function allowedCpus(pid = 'self') {
  return /^Cpus_allowed_list:\s*(.*)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1].trim();
}

/** Why the pinned mode cannot run here, or null. */
function unavailable() {
  if (spawnSync('taskset', ['--version']).error) return 'taskset not found (it is in util-linux)';
  const cpus = allowedCpus();
  const probe = spawnSync('taskset', ['-c', `${APP_CORE},${SERVER_CORE}`, 'true']);
  if (probe.status !== 0) return `cores ${APP_CORE} and ${SERVER_CORE} are not both available (this process may use ${cpus})`;
  return null;
}

/** Runs this script again under `taskset -c APP_CORE`; resolves to its
 *  exit status. Throws when taskset or the two cores are missing. */
export async function runPinned() {
  const why = unavailable();
  if (why) throw new Error(`--pin: ${why}`);
  const child = spawn('taskset', ['-c', String(APP_CORE), process.execPath, ...process.execArgv, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, [PINNED_ENV]: '1' },
  });
  // Ctrl-C reaches the child too (one process group): let it stop its
  // servers and report, and end with it.
  process.on('SIGINT', () => {});
  const [code, signal] = await once(child, 'exit');
  return code ?? (signal ? 1 : 0);
}

/** The command and arguments that start redis-server with `args`: under
 *  taskset on SERVER_CORE in the pinned mode (exec'd, so the pid is the
 *  server's). */
export function redisServerCommand(args) {
  return pinned ? ['taskset', ['-c', String(SERVER_CORE), 'redis-server', ...args]] : ['redis-server', args];
}

/** Throws unless process `pid` (what: its name) may run only on `core`,
 *  in the pinned mode: a pinning that did not take would measure the
 *  unpinned case under the pinned label. */
export function checkPinned(what, pid, core) {
  if (!pinned) return;
  const cpus = allowedCpus(pid);
  if (cpus !== String(core)) throw new Error(`--pin: ${what} (pid ${pid}) may run on cpus ${cpus}, not only on core ${core}`);
}
