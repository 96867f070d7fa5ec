// A private redis-server for one benchmark run: a free port, no persistence,
// stopped when the run ends (also on failure or Ctrl-C).
import { spawn } from 'node:child_process';
import net from 'node:net';
import { once } from 'node:events';

async function freePort() {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address();
  server.close();
  await once(server, 'close');
  return port;
}

/** Starts redis-server; resolves to { port, url, stop() } once it accepts connections. */
export async function startRedis() {
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const stop = () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  };
  process.once('exit', stop);
  let log = '';
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start:\n${log}`)), 10_000);
    child.stdout.on('data', (chunk) => {
      log += chunk;
      if (log.includes('Ready to accept connections')) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`redis-server exited with ${code}:\n${log}`));
    });
  });
  child.stdout.resume();
  return {
    port,
    url: `redis://127.0.0.1:${port}/0`,
    async stop() {
      stop();
      if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
    },
  };
}
