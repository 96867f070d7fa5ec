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

/**
 * Creates an app: `{ config, register(plugin), start(), stop(), get(plugin) }`.
 * `config` is the `options` map of the YAML file (keys are plugin names).
 */
export function createApp({ config = {}, logger = defaultLogger } = {}) {
  const plugins = [];
  const values = new Map();
  const provided = new Map();
  let started = [];

  const app = {
    config,
    /** Adds a plugin; its dependencies must be provided by plugins registered before it. */
    register(plugin) {
      for (const token of plugin.metadata?.dependencies ?? []) {
        if (!plugins.some((p) => p.provides === token)) {
          throw new Error(`plugin ${plugin.name} depends on ${token.name}, which no registered plugin provides`);
        }
      }
      plugins.push(plugin);
      return app;
    },
    /** Starts every plugin in registration order. */
    async start() {
      for (const plugin of plugins) {
        const context = {
          app,
          logger,
          getDependency(token) {
            if (!(plugin.metadata?.dependencies ?? []).includes(token)) {
              throw new Error(`plugin ${plugin.name} did not declare ${token.name} in metadata.dependencies`);
            }
            return provided.get(token);
          },
        };
        const value = await plugin.start(context);
        values.set(plugin, value);
        if (plugin.provides !== undefined) provided.set(plugin.provides, value);
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
  return app;
}
