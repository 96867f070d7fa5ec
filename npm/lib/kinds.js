// Lock kinds at the JS boundary: what an acquire asks for beyond a plain
// exclusive lease on one key (shared mode, a counted lock, several keys),
// checked once here for every path that needs it, and the UNSUPPORTED_KIND
// answer of a backend that cannot grant it. The rules are the core's
// (src/acquire.rs, LockKind::new and check_keys), so that an app driver
// never receives options the built-in drivers would refuse.
import { invalidArgument, LockError } from './errors.js';

/** Flags of askedKinds and declaredKinds: one bit per kind beyond a plain lease. */
export const SHARED = 1;
export const LIMIT = 2;
export const KEYS = 4;

/** The largest limit or weight: the core counts units in a u32. */
const MAX_UNITS = 4_294_967_295;

/** Each kind: its flag, its field in a `kinds` declaration, and its name in messages. */
const KINDS = Object.freeze([
  { flag: SHARED, field: 'shared', words: "mode 'shared'" },
  { flag: LIMIT, field: 'limit', words: 'limit/weight (a counted lock)' },
  { flag: KEYS, field: 'keys', words: 'several keys at once' },
]);

function units(name, value) {
  if (value === undefined || (Number.isInteger(value) && value >= 1 && value <= MAX_UNITS)) return;
  throw invalidArgument(`${name} must be an integer from 1 to ${MAX_UNITS}`);
}

/**
 * The kinds `key` and `options` ask for, as flags (0 for a plain exclusive
 * lease on one key; `limit: 1` is plain too). Throws INVALID_ARGUMENT for a
 * `mode` other than 'exclusive' or 'shared', a limit or weight that is not
 * an integer from 1, a weight above the limit, shared mode with a limit or
 * weight, and an empty or repeating key array; INVALID_KEY for an array
 * element that is not a string. Anything else (a key of the wrong type,
 * options that are not an object, other option fields) is left to the
 * acquire that follows: this checks kinds only, and never echoes a key.
 */
export function askedKinds(key, options) {
  const flags = Array.isArray(key) ? checkKeys(key) : 0;
  if (typeof options !== 'object' || options === null) return flags;
  const { mode, limit, weight } = options;
  if (mode === undefined && limit === undefined && weight === undefined) return flags;
  if (mode !== undefined && mode !== 'exclusive' && mode !== 'shared') throw invalidArgument("mode must be 'exclusive' or 'shared'");
  units('limit', limit);
  units('weight', weight);
  if (mode === 'shared') {
    if (limit !== undefined || weight !== undefined) {
      throw invalidArgument("mode 'shared' does not combine with limit or weight: shared leases are counted by mode, not units");
    }
    return flags | SHARED;
  }
  const max = limit ?? 1;
  if ((weight ?? 1) > max) {
    throw invalidArgument(`weight (${weight}) is above limit (${limit ?? '1, the default'}): such a lease could never be granted`);
  }
  return max === 1 ? flags : flags | LIMIT;
}

/** KEYS for a valid key array (never echoing a key); throws as askedKinds says. */
function checkKeys(keys) {
  if (keys.length === 0) throw invalidArgument('an acquire of several keys needs at least one key');
  const seen = new Set();
  for (let index = 0; index < keys.length; index++) {
    const key = keys[index];
    if (typeof key !== 'string') throw new LockError('INVALID_KEY', `keys[${index}] must be a string`);
    if (seen.has(key)) throw invalidArgument(`keys[${index}] repeats an earlier key: each key of one lease is given once`);
    seen.add(key);
  }
  return KEYS;
}

/**
 * The flags an app object's `kinds` declaration grants: undefined grants
 * none (plain exclusive leases only); otherwise an object of the fields
 * `shared`, `limit` and `keys`, each a boolean or undefined. `fail(message)`
 * builds the error for any other value (the caller's code: DRIVER_INVALID
 * for a driver's view, INVALID_EXTENSION for a wrapBackend result).
 */
export function declaredKinds(kinds, fail) {
  if (kinds === undefined) return 0;
  if (typeof kinds !== 'object' || kinds === null || Array.isArray(kinds)) throw fail('kinds must be an object { shared?, limit?, keys? } of booleans');
  for (const field of Object.keys(kinds)) {
    if (!KINDS.some((kind) => kind.field === field)) throw fail(`kinds.${field} is not a kind (shared, limit, keys)`);
  }
  let flags = 0;
  for (const { flag, field } of KINDS) {
    const value = kinds[field];
    if (value !== undefined && typeof value !== 'boolean') throw fail(`kinds.${field} must be a boolean`);
    if (value) flags |= flag;
  }
  return flags;
}

/**
 * UNSUPPORTED_KIND for the kinds `missing` (flags) that `who` (e.g. "driver
 * sqlite") cannot grant; `details` gains `kinds`, the fields of a `kinds`
 * declaration that would grant them.
 */
export function unsupportedKind(missing, who, details) {
  const asked = KINDS.filter((kind) => (missing & kind.flag) !== 0);
  const words = asked.map((kind) => kind.words).join(', ');
  return new LockError('UNSUPPORTED_KIND', `${who} cannot grant ${words}: it does not declare kinds.${asked.map((kind) => kind.field).join(', kinds.')}`, {
    details: { ...details, kinds: asked.map((kind) => kind.field) },
  });
}
