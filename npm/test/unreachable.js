// A Redis member nothing answers on, for the tests of a policy whose
// preferred member is down: a port whose listener never accepts and whose
// queue is full (a Python helper fills it and holds it until the test
// ends), so that a connect hangs with no socket up, as one to a host that
// is down, and ends after `connectTimeoutMs` as unreachable.
import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openLock } from '../index.js';

/** The port; its helper is killed when test `t` ends. */
export async function unreachablePort(t) {
  const fill = [
    'import socket, time',
    "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(0); port = s.getsockname()[1]; held = []",
    'while True:',
    '    c = socket.socket(); c.settimeout(0.05)',
    "    try: c.connect(('127.0.0.1', port)); held.append(c)",
    '    except OSError: break',
    'print(port, flush=True); time.sleep(600)',
  ].join('\n');
  const child = spawn('python3', ['-c', fill], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => child.kill());
  const [line] = await once(child.stdout, 'data');
  return Number(String(line).trim());
}

/**
 * A provider with a policy `locks: [cache, host]` (fallBack, minTier host,
 * `reprobeCooldownMs` `cooldownMs`): `cache` Redis at an unreachable port,
 * its connects ending after `connectMs`; `host` a file member.
 */
export async function overUnreachable(t, connectMs, cooldownMs) {
  const port = await unreachablePort(t);
  return openLock({
    config: {
      'dokebi-lock': {
        backends: {
          host: { driver: 'file', directory: join(mkdtempSync(join(tmpdir(), 'dokebi-unreachable-')), 'locks') },
          cache: { driver: 'redis', connection: 'main', leaseMs: 5000 },
          locks: {
            driver: 'policy',
            reprobeCooldownMs: cooldownMs,
            default: { backends: ['cache', 'host'], minTier: 'host', onUnavailable: 'fallBack' },
          },
        },
      },
      'dokebi-redis': { connections: { main: { url: `redis://127.0.0.1:${port}`, connectTimeoutMs: connectMs } } },
    },
  });
}
