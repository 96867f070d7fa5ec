// The dokebi plugin: the contract is written down in README.md ("Plugin contract").
import { invalidArgument, LockError } from './errors.js';
import { loadSections } from './options.js';
import { openProvider } from './provider.js';

/** The token a consumer plugin names in metadata.dependencies. */
export const dependency = Object.freeze({ name: 'dokebi-lock', description: 'the LockProvider of @dokebi/lock' });

/**
 * Creates the plugin. Reads `app.config['dokebi-lock']` (and
 * `['dokebi-redis']`) unless `options` (the dokebi-lock section) is given.
 * Invalid options fail here, with INVALID_PLUGIN_OPTIONS.
 */
export function createPlugin(input) {
  if (typeof input !== 'object' || input === null) throw invalidArgument('createPlugin takes { app, options?, entry? }');
  const { app, options, entry } = input;
  if (typeof app !== 'object' || app === null) throw invalidArgument('createPlugin needs the app: { app }');
  if (entry !== undefined) {
    throw new LockError('INVALID_ENTRY', 'extension entry modules are not supported by this version of @dokebi/lock');
  }
  const config = app.config ?? {};
  let validated;
  try {
    validated = loadSections(options ?? config['dokebi-lock'], config['dokebi-redis']);
  } catch (cause) {
    throw new LockError('INVALID_PLUGIN_OPTIONS', `invalid dokebi-lock plugin options: ${cause.message}`, {
      details: cause.details,
      cause,
    });
  }
  let provider;
  return Object.freeze({
    name: 'dokebi-lock',
    metadata: Object.freeze({ dependencies: Object.freeze([]) }),
    provides: dependency,
    /** Opens the backends; the returned provider is what app.get(plugin) gives. */
    async start(context) {
      provider = openProvider(validated, context?.logger);
      return provider;
    },
    /** Closes the backends (after the consumers stopped, in reverse order). */
    async stop() {
      await provider?.close();
    },
  });
}
