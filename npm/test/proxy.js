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

  const forward = (to, chunk) => (holding ? held.push([to, chunk]) : to.write(chunk));

  const server = createServer((client) => {
    const upstream = connect(target, '127.0.0.1');
    const pair = { client, upstream };
    pairs.add(pair);
    client.on('data', (chunk) => forward(upstream, chunk));
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
    /** Lets the held bytes through, and every later one. */
    flow() {
      holding = false;
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
