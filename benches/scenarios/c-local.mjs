// C, local driver through include/lock.h and liblock, against a pthread_mutex
// + hash map baseline in the same program (c/bench.c): one thread, then two
// and eight threads on one key.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { root, NotBuilt } from '../lib/dokebi.mjs';

const SOURCE = new URL('../c/bench.c', import.meta.url).pathname;
const BASELINE = 'pthread_mutex + hash map';
/** The system libraries a static liblock needs (its pkg-config
 *  Libs.private: the Rust standard library's, OpenSSL). */
function staticLibs(prefix) {
  const libs = execFileSync('pkg-config', ['--static', '--libs-only-l', 'liblock'], {
    encoding: 'utf8',
    env: { ...process.env, PKG_CONFIG_PATH: join(prefix, 'lib', 'pkgconfig') },
  });
  return libs.split(/\s+/).filter((l) => l && l !== '-llock');
}

/** The staged C install tree of scripts/build-c, release build preferred
 *  (or the tree DOKEBI_LOCK_C_PREFIX names, to measure another build). */
function stagedLibrary() {
  const given = process.env.DOKEBI_LOCK_C_PREFIX;
  if (given) return { prefix: given, profile: given.split('/').filter(Boolean).at(-1) };
  for (const profile of ['release', 'debug']) {
    const prefix = join(root, 'target', 'c', profile);
    if (existsSync(join(prefix, 'lib', 'liblock.a')) && existsSync(join(prefix, 'include', 'lock.h'))) return { prefix, profile };
  }
  return null;
}

/** Compiles c/bench.c once per run: with the C surface when it is built,
 *  else the baseline alone. */
function compile(outDir) {
  const lib = stagedLibrary();
  mkdirSync(outDir, { recursive: true });
  const binary = join(outDir, 'c-bench');
  const flags = ['-O2', '-std=c11', '-Wall', '-Wextra', '-Werror', '-pedantic', '-pthread'];
  const linked = lib ? ['-DWITH_DOKEBI', `-I${lib.prefix}/include`, SOURCE, `${lib.prefix}/lib/liblock.a`, ...staticLibs(lib.prefix)] : [SOURCE];
  execFileSync('cc', [...flags, ...linked, '-o', binary], { stdio: 'inherit' });
  const version = /^version = "(.*)"$/m.exec(readFileSync(join(root, 'Cargo.toml'), 'utf8'))[1];
  return { binary, version: lib && `${version} (${lib.profile})`, library: lib && `${lib.prefix}/lib/liblock.a` };
}

function scenario(id, title, threads, target, extra = '') {
  return {
    id,
    title,
    unit: 'pairs/s',
    subjects: ['dokebi-lock', BASELINE],
    target,
    note:
      threads > 1
        ? `Per-pair latency is the mean over batches of 1000 pairs. The critical section is empty, so how often a thread finds the key held (and waits for a hand-off) depends on scheduling.${extra}`
        : 'Per-pair latency is the mean over batches of 1000 pairs.',
    prepare: (ctx) => compile(ctx.outDir),
    async run(subject, ctx) {
      if (subject === 'dokebi-lock' && !ctx.prepared.library) throw new NotBuilt('C surface', 'no target/c/<profile>/lib/liblock.a: run scripts/build-c --release');
      const out = execFileSync(ctx.prepared.binary, [subject === BASELINE ? 'baseline' : 'dokebi-lock', String(threads), String(ctx.seconds)], { encoding: 'utf8' });
      const r = JSON.parse(out);
      return subject === BASELINE
        ? { version: 'glibc', defaults: { map: 'chained, 65536 buckets, FNV-1a', wait: 'per-key pthread_cond (not FIFO)' }, ...r, ops: r.pairs }
        : { version: ctx.prepared.version, defaults: { waitTimeoutMs: 'backend default (5000)', library: ctx.prepared.library.replace(root + '/', '') }, ...r, ops: r.pairs };
    },
  };
}

export const scenarios = [
  scenario('c-local-uncontended', 'C local: uncontended acquire+release, one key, one thread', 1, 'at least half the pthread_mutex + hash map baseline'),
  scenario('c-local-contended', 'C local: 2 threads on one key', 2, 'compared with the baseline (no target figure)'),
  scenario(
    'c-local-contended-8',
    'C local: 8 threads on one key',
    8,
    'at least 100k pairs/s on 2 cores, FIFO kept',
    ' With 8 threads on 2 cores, FIFO makes almost every pair a hand-off to a thread that is not running (one wake-up and one sleep per pair); the baseline lets a running thread take the key straight back.',
  ),
];
