// Turns the inputs of openLock and createPlugin into validated native options.
import { readFile } from 'node:fs/promises';
import { native } from './native.js';
import { invalidArgument, LockError, takeNativeError } from './errors.js';

/** JSON text of plain option data; anything JSON cannot carry is INVALID_OPTIONS. */
function json(value, path) {
  try {
    return JSON.stringify(value);
  } catch (cause) {
    throw new LockError('INVALID_OPTIONS', `invalid options: ${path}: not plain data`, {
      details: { issues: [{ path, message: 'not plain data' }] },
      cause,
    });
  }
}

function loaded(options) {
  if (options === null) throw takeNativeError();
  return options;
}

/**
 * The input of openLock: exactly one of `{ yaml }` (the file's text),
 * `{ file }` (its path) or `{ config }` (the parsed `options` map).
 */
export async function loadOpenInput(input) {
  if (typeof input !== 'object' || input === null) throw invalidArgument('openLock takes { yaml } | { file } | { config }');
  const sources = ['yaml', 'file', 'config'].filter((name) => input[name] !== undefined);
  if (sources.length !== 1) throw invalidArgument('openLock takes exactly one of yaml, file or config');
  const { yaml, file, config } = input;
  if (yaml !== undefined) {
    if (typeof yaml !== 'string') throw invalidArgument('yaml must be a string (the text of the options file)');
    return loaded(native.loadYaml(yaml));
  }
  if (file !== undefined) {
    if (typeof file !== 'string' && !(file instanceof URL)) throw invalidArgument('file must be a path string or a file: URL');
    let text;
    try {
      text = await readFile(file, 'utf8');
    } catch (cause) {
      throw new LockError('INVALID_OPTIONS', 'invalid options: the options file cannot be read', {
        details: { issues: [{ path: '', message: `cannot read the file (${cause.code ?? 'error'})` }] },
        cause,
      });
    }
    return loaded(native.loadYaml(text));
  }
  return loaded(native.loadConfig(json(config, 'options')));
}

/**
 * The dokebi-lock section and the store plugins' sections
 * (`{ 'dokebi-redis': ..., 'dokebi-postgres': ..., 'dokebi-mysql': ... }`); any may be undefined.
 */
export function loadSections(lock, stores) {
  const text = (value, path) => (value === undefined ? null : json(value, path));
  const store = (plugin) => text(stores[plugin], plugin);
  return loaded(native.loadSections(text(lock, 'dokebi-lock'), store('dokebi-redis'), store('dokebi-postgres'), store('dokebi-mysql')));
}
