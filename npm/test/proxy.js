// A TCP proxy between the library and a redis-server, for fault tests: it
// can hold every byte in both directions (a stalled network), let them
// through again, and reset the connections (an RST, as from a crashed peer).
import { createServer, connect } from 'node:net';

/** Starts a proxy on a free port to `target` (a port on 127.0.0.1). */
export async function startProxy(target) {
  const pairs = new Set();
  let holding = false;
  /** Bytes held while holding, in arrival order: [socket, chunk]. */
  let held = [];

  /** Holds only the bytes to the server from a chunk that matches on (see holdScripts). */
  let holdPattern = null;
  const forward = (to, chunk, pair) => {
    if (holding) return held.push([to, chunk]);
    if (holdPattern && to === pair?.upstream && (pair.stalled || holdPattern.test(chunk.toString('latin1')))) {
      pair.stalled = true;
      return held.push([to, chunk]);
    }
    to.write(chunk);
  };
  /** The upstream (server-side) sockets, to tell which held bytes go to the server. */
  const upstreams = new WeakSet();

  const server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    const pair = { client, upstream };
    upstreams.add(upstream);
    pairs.add(pair);
    client.on('data', (chunk) => forward(upstream, chunk, pair));
    upstream.on('data', (chunk) => forward(client, chunk));
    const end = () => {
      if (!pairs.delete(pair)) return;
      client.destroy();
      upstream.destroy();
    };
    client.on('close', end);
    upstream.on('close', end);
    client.on('error', end);
    upstream.on('error', end);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();

  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    /** Holds every byte from now on, both ways. */
    hold() {
      holding = true;
    },
    /**
     * Holds the commands a connection sends from its first script (EVALSHA)
     * on, and lets everything else through (a new connection's handshake):
     * scripts sent and never answered, on every connection.
     */
    holdScripts() {
      holdPattern = /EVALSHA/i;
    },
    /** The bytes held on their way to the server, as text (RESP is text enough). */
    heldToServer() {
      return Buffer.concat(held.filter(([to]) => upstreams.has(to)).map(([, chunk]) => chunk)).toString('latin1');
    },
    /** Lets the held bytes through, and every later one. */
    flow() {
      holding = false;
      holdPattern = null;
      for (const pair of pairs) pair.stalled = false;
      for (const [to, chunk] of held) if (!to.destroyed) to.write(chunk);
      held = [];
    },
    /** Resets every client connection (RST), as a crashed peer would. */
    reset() {
      for (const { client, upstream } of pairs) {
        client.resetAndDestroy();
        upstream.destroy();
      }
    },
    async close() {
      for (const { client, upstream } of pairs) {
        client.destroy();
        upstream.destroy();
      }
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
