// LockExtension and the entry module: how an app customises @dokebi/lock
// (README.md, "Extensions"). Everything here runs once, when the plugin or
// provider is created; nothing of it sits on the acquire path.
import { invalidExtension, LockError } from './errors.js';
import { checkDriverMap } from './drivers.js';

/** The three hooks a subclass may override; nothing else. */
const HOOKS = Object.freeze(['dependencies', 'createDriver', 'wrapBackend']);

/**
 * The base class of the app's extension (by convention the default export of
 * `src/infra/lock/extension.ts`). A subclass overrides any of the three
 * protected hooks; a hook it does not override is never called. Subclasses
 * take no constructor parameters and shadow no other member (checked by
 * createPlugin and openLock: INVALID_EXTENSION).
 */
export class LockExtension {
  /**
   * Tokens of the plugins this extension needs (added to the plugin's
   * `metadata.dependencies`); called once, by createPlugin.
   * @protected
   */
  dependencies() {
    return [];
  }

  /**
   * Opens the driver of one backend, once per backend: `input.open()` opens
   * the registered driver (built-in or app); return it or your own
   * `{ view, close }`.
   * @protected
   */
  createDriver(input) {
    return input.open();
  }

  /**
   * Wraps the backend users get (`input.backend`), once per backend, after
   * its driver opened: return a backend with `acquire(key, options)`.
   * @protected
   */
  wrapBackend(input) {
    return input.backend;
  }
}

/** INVALID_EXTENSION for a rule the subclass `Extension` broke, named in the message and details. */
function subclassBroke(Extension, reason, message, extra = {}) {
  return invalidExtension(reason, `${Extension.name || 'LockExtension subclass'}: ${message}`, {
    ...extra,
    details: { extension: Extension.name, ...extra.details },
  });
}

/** The prototypes from `Extension.prototype` up to, not including, LockExtension.prototype. */
function ownPrototypes(Extension) {
  const chain = [];
  for (let proto = Extension.prototype; proto !== LockExtension.prototype; proto = Object.getPrototypeOf(proto)) chain.push(proto);
  return chain;
}

/** A member of the base (its own or Object's) that a subclass may not redefine. */
function isReservedMember(name) {
  return name !== 'constructor' && !HOOKS.includes(name) && name in LockExtension.prototype;
}

/**
 * Instantiates and checks a LockExtension subclass; returns the hooks it
 * overrides (bound to the instance), the others absent.
 */
export function instantiate(Extension) {
  for (const proto of ownPrototypes(Extension)) {
    if (proto.constructor.length > 0) {
      throw subclassBroke(Extension, 'constructor-parameters', 'the constructor must take no parameters (the plugin creates the extension)');
    }
    const shadowed = Reflect.ownKeys(proto).find(isReservedMember);
    if (shadowed !== undefined) {
      throw subclassBroke(Extension, 'shadows-member', `${String(shadowed)} is not a hook and must not be redefined`, {
        details: { member: String(shadowed) },
      });
    }
  }
  let instance;
  try {
    instance = new Extension();
  } catch (cause) {
    throw subclassBroke(Extension, 'constructor-threw', 'the constructor threw', { cause });
  }
  const shadowed = Reflect.ownKeys(instance).find(isReservedMember);
  if (shadowed !== undefined) {
    throw subclassBroke(Extension, 'shadows-member', `${String(shadowed)} is not a hook and must not be redefined`, {
      details: { member: String(shadowed) },
    });
  }
  const hooks = {};
  for (const hook of HOOKS) {
    const method = instance[hook];
    if (method === LockExtension.prototype[hook]) continue;
    if (typeof method !== 'function') throw subclassBroke(Extension, 'hook-not-a-function', `${hook} must be a method`, { details: { member: hook } });
    hooks[hook] = method.bind(instance);
  }
  return hooks;
}

function invalidEntry(reason, message) {
  return new LockError('INVALID_ENTRY', `invalid extension entry module: ${message}`, { data: { reason }, details: { reason } });
}

function isExtensionClass(value) {
  return typeof value === 'function' && value !== LockExtension && value.prototype instanceof LockExtension;
}

/**
 * Reads an entry module (its namespace object, or any object of the same
 * shape): exactly one LockExtension subclass, as the default or a named
 * export, and optionally `drivers`. Returns `{ hooks, drivers }`;
 * INVALID_ENTRY for any other shape, INVALID_EXTENSION for a bad subclass.
 */
export function readEntry(entry) {
  if (typeof entry !== 'object' || entry === null) throw invalidEntry('not-a-module', 'entry must be the imported module (an object)');
  const fail = (message) => invalidEntry('drivers', message);
  const drivers = entry.drivers === undefined ? undefined : checkDriverMap(entry.drivers, fail);
  if (entry.default !== undefined && !isExtensionClass(entry.default)) {
    throw invalidEntry('default-export', 'the default export must be a LockExtension subclass');
  }
  const classes = new Set(Object.values(entry).filter(isExtensionClass));
  if (classes.size !== 1) {
    throw invalidEntry(
      classes.size === 0 ? 'no-extension' : 'several-extensions',
      `export exactly one LockExtension subclass (found ${classes.size}); it must extend the LockExtension of this @dokebi/lock`,
    );
  }
  const [Extension] = classes;
  return { hooks: instantiate(Extension), drivers };
}

/**
 * Checks what the dependencies() hook returned: an array of tokens, objects
 * naming the plugin they stand for (`{ name, optional? }`).
 */
export function checkDependencies(tokens) {
  const isToken = (token) => typeof token === 'object' && token !== null && typeof token.name === 'string';
  if (!Array.isArray(tokens) || !tokens.every(isToken)) {
    throw invalidExtension('dependencies-result', 'dependencies() must return an array of plugin tokens ({ name })');
  }
  return tokens;
}
