// Loading @dokebi/lock from this checkout (npm/), and telling "not built yet"
// apart from a real failure: a scenario whose component is missing is reported
// as skipped, never measured with a stand-in.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

export const root = new URL('../..', import.meta.url).pathname.replace(/\/$/, '');

/** Thrown when a component of the project is not built in this checkout. */
export class NotBuilt extends Error {
  constructor(component, why) {
    super(`${component} not built${why ? ` (${why})` : ''}`);
    this.component = component;
  }
}

function entryOf(pkg) {
  const pick = (e) => (typeof e === 'string' ? e : e && (pick(e.import) ?? pick(e.node) ?? pick(e.default)));
  const exp = pkg.exports;
  return pick(exp && typeof exp === 'object' && '.' in exp ? exp['.'] : exp) ?? pkg.main ?? 'index.js';
}

/** The @dokebi/lock package measured: this checkout's npm/, or DOKEBI_LOCK_NPM. */
const packageDir = () => process.env.DOKEBI_LOCK_NPM ?? join(root, 'npm');

let loaded;
/** The @dokebi/lock module of this checkout's npm/ (or of the package
 *  directory named by DOKEBI_LOCK_NPM, to measure another build), or NotBuilt. */
export async function loadDokebi() {
  if (loaded) return loaded;
  const dir = packageDir();
  if (!existsSync(join(dir, 'package.json'))) throw new NotBuilt('Node addon', 'no npm/package.json');
  const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8'));
  let mod;
  try {
    mod = await import(pathToFileURL(join(dir, entryOf(pkg))).href);
  } catch (error) {
    throw new NotBuilt('Node addon', error.message.split('\n')[0]);
  }
  if (typeof mod.openLock !== 'function') throw new NotBuilt('Node addon', 'no openLock export');
  loaded = { mod, version: pkg.version };
  return loaded;
}

/** The addon's cheapest Node-API function (`takeError` with no error
 *  pending answers undefined): one crossing into native code and back, the
 *  least a lock whose state lives in Rust pays per pair (SPEC §4). */
export async function oneNativeCall() {
  await loadDokebi();
  const { native } = await import(pathToFileURL(join(packageDir(), 'lib', 'native.js')).href);
  return () => native.takeError();
}

/** YAML of a provider with one backend called "bench" (YAML flow mappings
 *  are JSON, so the settings are written as JSON). `connection` is a URL
 *  (one server) or a connection mapping such as { cluster: { nodes } },
 *  named "main" in the driver's section (`dokebi-redis`, `dokebi-postgres`, `dokebi-mysql`). */
export function yamlFor(settings, connection, section = 'dokebi-redis') {
  const lines = ['schemaVersion: 1', 'options:', '  dokebi-lock:', `    backends: { bench: ${JSON.stringify(settings)} }`];
  if (connection) {
    const main = typeof connection === 'string' ? { url: connection } : connection;
    lines.push(`  ${section}:`, `    connections: { main: ${JSON.stringify(main)} }`);
  }
  return lines.join('\n') + '\n';
}

/** Opens a provider over `backend` settings; resolves to { provider, backend, version }. */
export async function openBackend(settings, connection, section) {
  const { mod, version } = await loadDokebi();
  const provider = await mod.openLock({ yaml: yamlFor(settings, connection, section) });
  return { provider, backend: provider.backend('bench'), version };
}

/** A redis backend of ours over `connection` (see yamlFor), or NotBuilt
 *  when the redis driver is missing: a first try-acquire must succeed
 *  against the private server. */
export async function openRedisBackend(connection, extra = {}) {
  let opened;
  try {
    opened = await openBackend({ driver: 'redis', connection: 'main', namespace: 'bench', leaseMs: 10000, ...extra }, connection);
    const probe = await opened.backend.acquire(`probe-${process.pid}`, { waitTimeoutMs: 0 });
    await probe.release();
  } catch (error) {
    if (error instanceof NotBuilt) throw error;
    await opened?.provider.close().catch(() => {});
    // Over a cluster or another topology a failure is the topology's (or
    // its support's), which a skip would hide; the one-server scenarios
    // already tell whether the driver is there.
    if (typeof connection !== 'string') throw error;
    throw new NotBuilt('redis driver', `${error.code ?? error.name}: ${error.message.split('\n')[0]}`);
  }
  return opened;
}

/** Releases `lease` and resolves to whether release() returned a promise.
 *  A user awaits release() where it returns a promise and not where it
 *  returns a plain boolean; the local loop is written accordingly. */
export function releaseIsAsync(lease) {
  const r = lease.release();
  return typeof r?.then === 'function' ? r.then(() => true) : Promise.resolve(false);
}
