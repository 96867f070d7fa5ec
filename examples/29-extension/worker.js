// The other process of example 29 (main.js runs it): opens the same SQLite
// file standalone, with openLock and the same entry module, and tries the key
// main.js holds.
import { openLock, LockError } from '../../npm/index.js';
import * as entry from './src/infra/lock/extension.ts';

const [file, key] = process.argv.slice(2);
const lock = await openLock({ config: { 'dokebi-lock': { backends: { reports: { driver: 'sqlite', file, leaseMs: 10000 } } } }, entry });
try {
  await lock.backend('reports').acquire(key, { waitTimeoutMs: 0 });
  console.log('acquired');
} catch (error) {
  if (!(error instanceof LockError)) throw error;
  console.log(error.code);
} finally {
  await lock.close();
}
