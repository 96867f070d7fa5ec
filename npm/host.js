// A minimal dokebi host: enough of the host contract (README.md, "Plugin
// contract") to run @dokebi/lock without the dokebi framework, in tests,
// examples and small apps.

/** Logs nothing at debug, errors to stderr. */
const defaultLogger = Object.freeze({
  debug() {},
  error(fields, message) {
    console.error('error', fields, message);
  },
});

/** The plugin `token` names (a token is `{ name, optional? }`; see README.md). */
function named(plugins, token) {
  return plugins.find((plugin) => plugin.name === token.name);
}

/**
 * Creates an app: `{ config, root?, register(plugin), start(), stop(), get(plugin) }`.
 * `config` is the `options` map of the YAML file (keys are plugin names);
 * `root` the app's directory (plugins resolve the app's packages from it).
 */
export function createApp({ config = {}, logger = defaultLogger, root } = {}) {
  const plugins = [];
  const values = new Map();
  let started = [];

  const app = {
    config,
    /**
     * Adds a plugin. A dependency (a token naming a plugin) must be
     * registered before it; an optional one may be absent, but not come
     * later: every dependency starts before, and stops after, its dependents.
     */
    register(plugin) {
      for (const token of plugin.metadata?.dependencies ?? []) {
        if (token.optional !== true && named(plugins, token) === undefined) {
          throw new Error(`plugin ${plugin.name} depends on ${token.name}, which no registered plugin provides`);
        }
      }
      const dependent = plugins.find((earlier) => (earlier.metadata?.dependencies ?? []).some((token) => token.name === plugin.name));
      if (dependent !== undefined) {
        throw new Error(`plugin ${plugin.name} must be registered before ${dependent.name}, which depends on it`);
      }
      plugins.push(plugin);
      return app;
    },
    /** Starts every plugin in registration order. */
    async start() {
      for (const plugin of plugins) {
        const declared = plugin.metadata?.dependencies ?? [];
        const context = {
          app,
          logger,
          /** The value the named plugin's start returned; undefined for an optional one not registered. */
          getDependency(token) {
            if (!declared.some((declaredToken) => declaredToken.name === token?.name)) {
              throw new Error(`plugin ${plugin.name} did not declare ${token?.name} in metadata.dependencies`);
            }
            const provider = named(plugins, token);
            return provider === undefined ? undefined : values.get(provider);
          },
        };
        const value = await plugin.start(context);
        values.set(plugin, value);
        started.push({ plugin, context });
      }
    },
    /** The value a started plugin's start() returned. */
    get(plugin) {
      if (!values.has(plugin)) throw new Error(`plugin ${plugin.name} is not started`);
      return values.get(plugin);
    },
    /** Stops the started plugins in reverse order; a failing stop is logged and the rest still stop. */
    async stop() {
      const stopping = started.reverse();
      started = [];
      for (const { plugin, context } of stopping) {
        try {
          await plugin.stop?.(context);
        } catch (error) {
          logger.error({ plugin: plugin.name, code: error?.code }, 'plugin stop failed');
        }
        values.delete(plugin);
      }
    },
  };
  if (root !== undefined) app.root = root;
  return app;
}
