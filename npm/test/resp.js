// A raw Redis client for tests: one command over node:net in RESP, so a
// test can change what the lock library reads without going through it.
import { connect } from 'node:net';
import { createHash } from 'node:crypto';

/** Sends one command to the server on `port`; resolves to the raw reply text. */
export function command(port, ...args) {
  const request = `*${args.length}\r\n` + args.map((arg) => `$${Buffer.byteLength(String(arg))}\r\n${arg}\r\n`).join('');
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(request));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString());
    });
    socket.once('error', reject);
  });
}

/** The Redis key a redis backend of `namespace` holds `key` under. */
export function lockKey(namespace, key) {
  return `${namespace}:lock:{${createHash('sha256').update(key).digest('base64url').slice(0, 22)}}`;
}
