// @dokebi/lock: keyed locks with fencing tokens for Node 24.
import { loadOpenInput } from './lib/options.js';
import { openProvider, LockProvider } from './lib/provider.js';

export { LockError } from './lib/errors.js';
export { createPlugin, dependency } from './lib/plugin.js';
export { LockProvider };

/**
 * Opens a provider from `{ yaml }`, `{ file }` or `{ config }` (the parsed
 * `options` map), for apps without a dokebi host. `logger` receives
 * `{ backend, code }` records at debug and error.
 */
export async function openLock(input) {
  const options = await loadOpenInput(input);
  return openProvider(options, input.logger);
}
