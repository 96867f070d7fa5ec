// Starts a private redis-server on a free port for one test file, and stops
// it at the end (also on failure). Never uses 6379.
import { before, after } from 'node:test';
import { spawn } from 'node:child_process';
import { createServer, connect } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

async function freePort() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function answersPing(port) {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      // NOAUTH: up, with a password.
      resolve(/^(\+PONG|-NOAUTH)/.test(data.toString()));
    });
    socket.once('error', () => resolve(false));
  });
}

/** `{ url, port, stop() }` of a fresh redis-server without persistence,
 *  started with the `extra` arguments. */
export async function startRedis(extra = []) {
  return startRedisOn(await freePort(), extra);
}

async function startRedisOn(port, extra) {
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', ...extra], {
    stdio: 'ignore',
  });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  for (let attempt = 0; !(await answersPing(port)); attempt++) {
    if (attempt > 100 || child.exitCode !== null) {
      child.kill('SIGKILL');
      throw new Error(`redis-server did not start on port ${port}`);
    }
    await sleep(50);
  }
  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    /** Freezes the server (SIGSTOP): connections stay open, nothing answers. */
    pause() {
      child.kill('SIGSTOP');
    },
    /** Thaws a paused server (SIGCONT): it runs what it had read. */
    resume() {
      child.kill('SIGCONT');
    },
    async stop() {
      if (child.exitCode === null) child.kill('SIGKILL');
      await exited;
    },
    /** A fresh (empty) server on the same port, once this one is stopped. */
    restart() {
      return startRedisOn(port, extra);
    },
  };
}

/**
 * Starts a private redis-server before the tests of the calling file and
 * stops it after them; the returned object gets `url` and `port` once it runs.
 */
export function useRedis() {
  const redis = { url: undefined, port: undefined };
  let server;
  before(async () => {
    server = await startRedis();
    Object.assign(redis, { url: server.url, port: server.port });
  });
  after(async () => {
    await server?.stop();
  });
  return redis;
}
