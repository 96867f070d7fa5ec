// Counting what clients send to Redis.
//
// INFO commandstats counts every command the server ran, including the ones a
// Lua script ran (a script's redis.call('PUBLISH') is a `publish` call), so it
// says what the server did. MONITOR tags commands run by a script with source
// "lua", so counting the others gives the commands clients sent: an upper
// bound on round trips (pipelined commands share one).
import Redis from 'ioredis';

/** Parses INFO commandstats into { command: calls }. */
export function parseCommandstats(info) {
  const calls = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[m[1]] = Number(m[2]);
  return calls;
}

/** Commands run between two parseCommandstats() snapshots, without the
 *  harness's own INFO calls. */
export function commandDelta(before, after) {
  const delta = {};
  for (const [cmd, n] of Object.entries(after)) {
    const d = n - (before[cmd] ?? 0);
    if (d > 0 && cmd !== 'info') delta[cmd] = d;
  }
  return delta;
}

export function sum(counts) {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}

/** Snapshots of INFO commandstats over a dedicated connection. */
export async function commandstats(url) {
  const admin = new Redis(url, { lazyConnect: true });
  await admin.connect();
  return {
    snapshot: async () => parseCommandstats(await admin.info('commandstats')),
    close: () => admin.quit(),
  };
}

/** Runs `body` under MONITOR; resolves to the number of commands clients
 *  sent meanwhile (script-internal ones excluded) and the result of body. */
export async function countClientCommands(url, body) {
  const monitor = await new Redis(url).monitor();
  let sent = 0;
  monitor.on('monitor', (_time, _args, source) => {
    if (source !== 'lua') sent++;
  });
  // An ECHO through a second connection marks the start and end: MONITOR
  // delivers events asynchronously, so wait until our own markers show up.
  const marker = new Redis(url);
  const fence = async () => {
    const tag = `bench-marker-${Math.random()}`;
    const seen = new Promise((resolve) => {
      const onEvent = (_t, args) => {
        if (args[0]?.toLowerCase() === 'echo' && args[1] === tag) {
          monitor.off('monitor', onEvent);
          resolve();
        }
      };
      monitor.on('monitor', onEvent);
    });
    await marker.echo(tag);
    await seen;
  };
  await fence();
  sent = 0;
  const result = await body();
  await fence();
  const total = sent - 1; // the closing marker
  monitor.disconnect();
  marker.disconnect();
  return { sent: total, result };
}
