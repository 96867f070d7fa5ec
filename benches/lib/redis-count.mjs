// Counting what clients send to Redis.
//
// INFO commandstats counts every command the server ran, including the ones a
// Lua script ran (a script's redis.call('PUBLISH') is a `publish` call), so it
// says what the server did. MONITOR tags commands run by a script with source
// "lua", so counting the others gives the commands clients sent: an upper
// bound on round trips (pipelined commands share one).
import net from 'node:net';
import { once } from 'node:events';
import Redis from 'ioredis';

/** Parses INFO commandstats into { command: calls }. */
export function parseCommandstats(info) {
  const calls = {};
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[m[1]] = Number(m[2]);
  return calls;
}

/** Commands run between two parseCommandstats() snapshots, without the
 *  harness's own INFO, ECHO and MONITOR calls. */
const HARNESS = new Set(['info', 'echo', 'monitor']);
export function commandDelta(before, after) {
  const delta = {};
  for (const [cmd, n] of Object.entries(after)) {
    const d = n - (before[cmd] ?? 0);
    if (d > 0 && !HARNESS.has(cmd)) delta[cmd] = d;
  }
  return delta;
}

export function sum(counts) {
  return Object.values(counts).reduce((a, b) => a + b, 0);
}

/** Adds up parseCommandstats() results (or deltas) of several nodes. */
export function addCounts(list) {
  const total = {};
  for (const counts of list) for (const [cmd, n] of Object.entries(counts)) total[cmd] = (total[cmd] ?? 0) + n;
  return total;
}

/** Snapshots of INFO commandstats over a dedicated connection to each of
 *  `urls` (one URL or a list: the primaries of a cluster). */
export async function commandstats(urls) {
  const admins = [urls].flat().map((url) => new Redis(url, { lazyConnect: true }));
  await Promise.all(admins.map((a) => a.connect()));
  const each = () => Promise.all(admins.map(async (a) => parseCommandstats(await a.info('commandstats'))));
  return {
    /** Summed over the nodes. */
    snapshot: async () => addCounts(await each()),
    /** One per node, in the order of `urls`. */
    snapshotEach: each,
    close: () => Promise.all(admins.map((a) => a.quit())),
  };
}

/** A MONITOR connection over a plain socket (ioredis's monitor mode can
 *  lose track of its reply queue when the first events arrive with the OK).
 *  Calls onCommand(source, name) for every command the server runs, where
 *  source is "lua" for commands run by a script, else the client's
 *  host:port. */
async function monitor(url, onCommand) {
  const { hostname, port } = new URL(url);
  const socket = net.connect(Number(port), hostname);
  await once(socket, 'connect');
  socket.setEncoding('utf8');
  let buffered = '';
  socket.on('data', (chunk) => {
    const lines = (buffered + chunk).split('\r\n');
    buffered = lines.pop();
    for (const line of lines) {
      // +1700000000.123456 [0 127.0.0.1:5555] "set" "k" ... or [0 lua]
      const m = /^\+\d+\.\d+ \[\d+ ([^\]]+)\] "([^"]*)"/.exec(line);
      if (m) onCommand(m[1], m[2].toLowerCase());
    }
  });
  socket.write('MONITOR\r\n');
  return () => socket.destroy();
}

/** The CPU time (user + system, seconds) the redis processes at `urls` (one
 *  URL or a list; sentinels too) have used, from INFO cpu: so a row can say
 *  what each pair cost the servers, not only the app. */
export async function serverCpu(urls) {
  const admins = [urls].flat().map((url) => new Redis(url, { lazyConnect: true }));
  await Promise.all(admins.map((a) => a.connect()));
  const used = (info) => Number(/^used_cpu_user:([\d.]+)/m.exec(info)[1]) + Number(/^used_cpu_sys:([\d.]+)/m.exec(info)[1]);
  return {
    seconds: async () => (await Promise.all(admins.map((a) => a.info('cpu')))).reduce((total, info) => total + used(info), 0),
    // disconnect, not QUIT: a sentinel does not know QUIT.
    close: () => admins.forEach((a) => a.disconnect()),
  };
}

/** The bytes the primaries at `urls` (one URL or a list) have put in their
 *  replication streams (INFO replication's master_repl_offset, summed): what
 *  every replica of theirs receives. `bytes()` is null where no primary has
 *  a replica (a server without one keeps no stream). */
export async function replicationStream(urls) {
  const admins = [urls].flat().map((url) => new Redis(url, { lazyConnect: true }));
  await Promise.all(admins.map((a) => a.connect()));
  const field = (info, name) => Number(new RegExp(`^${name}:(\\d+)`, 'm').exec(info)?.[1] ?? 0);
  return {
    bytes: async () => {
      const infos = await Promise.all(admins.map((a) => a.info('replication')));
      if (infos.every((info) => field(info, 'connected_slaves') === 0)) return null;
      return infos.reduce((total, info) => total + field(info, 'master_repl_offset'), 0);
    },
    close: () => admins.forEach((a) => a.disconnect()),
  };
}

/** Runs `body` under MONITOR on each of `urls` (one URL or a list: every
 *  node of a cluster); resolves to the number of commands clients sent
 *  meanwhile (script-internal ones excluded) and the result of body.
 *  Commands a replica gets from its primary come from a monitored node's
 *  address and are not counted: the client sent them once, to the primary. */
export async function countClientCommands(urls, body) {
  const list = [urls].flat();
  const nodeAddresses = new Set(list.map((url) => new URL(url).host));
  let sent = 0;
  const fences = [];
  const stops = [];
  try {
    for (const url of list) {
      let markerSeen;
      stops.push(
        await monitor(url, (source, name) => {
          if (name === 'echo') markerSeen?.();
          else if (source !== 'lua' && !nodeAddresses.has(source)) sent++;
        }),
      );
      // MONITOR delivers events asynchronously: an ECHO through a second
      // connection marks the start and the end of the counted stretch.
      const marker = new Redis(url);
      stops.push(() => marker.disconnect());
      fences.push(async () => {
        const seen = new Promise((resolve) => (markerSeen = resolve));
        await marker.echo('bench-marker');
        await seen;
      });
    }
    const fence = () => Promise.all(fences.map((f) => f()));
    await fence();
    sent = 0;
    const result = await body();
    await fence();
    return { sent, result };
  } finally {
    for (const stop of stops) stop();
  }
}
