// @dokebi/lock: keyed locks with fencing tokens for Node 24.
import { loadOpenInput } from './lib/options.js';
import { openProvider, LockProvider } from './lib/provider.js';
import { readEntry } from './lib/extension.js';
import { collectDrivers, DriverSet, optionDrivers } from './lib/drivers.js';

export { DokebiError, LockError } from './lib/errors.js';
export { createPlugin, defineLockPlugin, dependency, mysqlDependency, postgresDependency, redisDependency } from './lib/plugin.js';
export { LockExtension } from './lib/extension.js';
export { LockProvider };

/**
 * Opens a provider from `{ yaml }`, `{ file }` or `{ config }` (the parsed
 * `options` map), for apps without a dokebi host. `logger` receives
 * `{ backend, code }` records at debug and error. App drivers come from
 * `drivers` (`{ <name>: (input) => driver }`) and from `entry` (an entry
 * module: a LockExtension subclass and optionally `drivers`).
 */
export async function openLock(input) {
  const options = await loadOpenInput(input);
  const { hooks, drivers } = input.entry === undefined ? {} : readEntry(input.entry);
  const registry = collectDrivers([
    { source: 'openLock drivers', drivers: optionDrivers(input.drivers) },
    { source: 'the entry module', drivers },
  ]);
  return openProvider(options, input.logger, new DriverSet(registry, hooks));
}
