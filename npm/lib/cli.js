// The command-line tool (`npx dokebi-lock`, bin/dokebi-lock.js): what an
// on-call engineer types when a lock misbehaves. It opens the app's own
// options file, runs one command against one backend, prints a table (or
// JSON with --json) and closes the provider. It prints no password: the
// options it prints nothing of, and an error's message and details never
// carry one (LockError's rule).
import { pathToFileURL } from 'node:url';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { openLock } from '../index.js';
import { LockError } from './errors.js';

export const USAGE = `usage: dokebi-lock [options] <command>

commands:
  status [backend]            each backend's driver, and whether its store answers now
  inspect <backend> <key>     who holds the key and who waits (backend.inspect)
  force-release <backend> <key>
                              remove every holder of the key and raise its fence
                              (backend.forceRelease); asks first unless --yes

options:
  --config <file>   the app's options file (default: $DOKEBI_LOCK_CONFIG, else ./dokebi.yaml)
  --entry <module>  the app's entry module, for backends of its own drivers
  --json            print JSON instead of a table
  --yes             force-release without asking
  --help            this text

exit status: 0 done, 1 the command failed (its error code is printed), 2 a usage error`;

/** A usage error: printed with the usage, exit status 2. */
class UsageError extends Error {}

/** The parsed command line: `{ command, operands, config, entry, json, yes, help }`. */
export function parseArguments(argv, env = process.env) {
  const parsed = { operands: [], config: env.DOKEBI_LOCK_CONFIG || 'dokebi.yaml', entry: undefined, json: false, yes: false, help: false };
  for (let at = 0; at < argv.length; at++) {
    const argument = argv[at];
    const value = () => {
      if (at + 1 >= argv.length) throw new UsageError(`${argument} needs a value`);
      return argv[++at];
    };
    if (argument === '--config') parsed.config = value();
    else if (argument === '--entry') parsed.entry = value();
    else if (argument === '--json') parsed.json = true;
    else if (argument === '--yes' || argument === '-y') parsed.yes = true;
    else if (argument === '--help' || argument === '-h') parsed.help = true;
    else if (argument.startsWith('-') && argument !== '-') throw new UsageError(`unknown option ${argument}`);
    else parsed.operands.push(argument);
  }
  [parsed.command, ...parsed.operands] = parsed.operands;
  const wanted = { status: [0, 1], inspect: [2, 2], 'force-release': [2, 2] }[parsed.command];
  if (!parsed.help) {
    if (parsed.command === undefined) throw new UsageError('no command');
    if (wanted === undefined) throw new UsageError(`unknown command ${parsed.command}`);
    if (parsed.operands.length < wanted[0] || parsed.operands.length > wanted[1]) throw new UsageError(`${parsed.command}: wrong number of arguments`);
  }
  return parsed;
}

/** Milliseconds as an operator reads them: `840 ms`, `8.4 s`, `3 min 20 s`. */
function duration(ms) {
  if (ms === null) return 'never expires';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
}

/** Rows of cells, each column padded to its widest cell. */
function table(rows) {
  const widths = rows[0].map((_, column) => Math.max(...rows.map((row) => String(row[column]).length)));
  return rows.map((row) => row.map((cell, column) => String(cell).padEnd(widths[column])).join('  ').trimEnd()).join('\n');
}

function inspectionText(found) {
  const lines = [];
  const how = found.mode === null ? 'free' : `held ${found.mode}${found.limit > 1 ? `, limit ${found.limit}` : ''}`;
  lines.push(table([
    ['backend', found.backend],
    ['state', how],
    ['holders', found.held],
    ['waiting', found.waiting],
    ['fence', found.fence ?? '-'],
  ]));
  if (found.holders.length > 0) {
    const rows = [['#', 'holder', 'units', 'held for', 'lease left', 'fence']];
    found.holders.forEach((holder, at) =>
      rows.push([
        at + 1,
        holder.label ?? '-',
        holder.units,
        holder.heldForMs === null ? '-' : duration(holder.heldForMs),
        duration(holder.remainingMs),
        holder.fence ?? '-',
      ]),
    );
    lines.push('', table(rows));
    if (found.held > found.holders.length) lines.push(`(${found.held - found.holders.length} more not listed)`);
  }
  return lines.join('\n');
}

function forcedText(forced) {
  const lines = [`removed ${forced.removed} holder${forced.removed === 1 ? '' : 's'} on ${forced.backend}`];
  if (forced.fence !== null) {
    lines.push(`fence raised to ${forced.fence}: write it to your fenced store as the highest fence seen, and the removed holders' late writes are refused`);
  }
  return lines.join('\n');
}

/** Whether the store of each backend answers now: one inspect of a key nobody uses. */
async function reachability(provider, names) {
  const rows = [];
  for (const name of names) {
    const backend = provider.backend(name);
    const { driver } = backend.status();
    const entry = { backend: name, driver, store: 'in process', ms: null, error: null };
    if (['redis', 'postgres', 'mysql', 'policy'].includes(driver)) {
      const started = performance.now();
      try {
        await backend.inspect('dokebi-lock:cli:reachability');
        entry.store = 'answers';
      } catch (error) {
        entry.store = 'fails';
        entry.error = error instanceof LockError ? { code: error.code, message: error.message } : { code: 'ERROR', message: String(error) };
      }
      entry.ms = Math.round(performance.now() - started);
    }
    rows.push(entry);
  }
  return rows;
}

function reachabilityText(rows) {
  const cells = [['backend', 'driver', 'store', 'answered in']];
  for (const row of rows) {
    cells.push([row.backend, row.driver, row.error === null ? row.store : `fails: ${row.error.code}`, row.ms === null ? '-' : `${row.ms} ms`]);
  }
  return table(cells);
}

/** Asks on the terminal; false when nobody can answer (not a terminal). */
async function confirmed(question, io) {
  if (!io.stdin.isTTY) return false;
  const prompt = createInterface({ input: io.stdin, output: io.stderr });
  try {
    return /^y(es)?$/i.test((await prompt.question(`${question} [y/N] `)).trim());
  } finally {
    prompt.close();
  }
}

/**
 * Runs the tool with `argv` (the arguments after the script): the exit
 * status. `io` is `{ stdin, stdout, stderr, env, cwd }`.
 */
export async function run(argv, io = { stdin: process.stdin, stdout: process.stdout, stderr: process.stderr, env: process.env, cwd: process.cwd() }) {
  let options;
  try {
    options = parseArguments(argv, io.env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.stderr.write(`dokebi-lock: ${error.message}\n\n${USAGE}\n`);
    return 2;
  }
  if (options.help) {
    io.stdout.write(`${USAGE}\n`);
    return 0;
  }
  const print = (value, text) => io.stdout.write(`${options.json ? JSON.stringify(value, null, 2) : text(value)}\n`);
  const fail = (error) => {
    if (options.json) io.stdout.write(`${JSON.stringify({ error: { code: error.code, message: error.message, details: error.details ?? null } }, null, 2)}\n`);
    io.stderr.write(`dokebi-lock: ${error.code}: ${error.message}\n`);
    return 1;
  };
  let provider;
  try {
    const entry = options.entry === undefined ? undefined : await import(pathToFileURL(resolve(io.cwd, options.entry)).href);
    provider = await openLock({ file: resolve(io.cwd, options.config), entry });
    const [first, key] = options.operands;
    if (options.command === 'status') {
      if (first !== undefined) provider.backend(first); // UNKNOWN_BACKEND before any probe
      const names = first === undefined ? provider.names() : [first];
      print(await reachability(provider, names), reachabilityText);
    } else {
      const backend = provider.backend(first);
      if (backend.status().driver === 'local') {
        // Its locks live in the app's memory: this process would see only its own.
        io.stderr.write(`dokebi-lock: ${first} is a local backend: its locks live inside the app's process, which this tool cannot reach\n`);
        return 2;
      }
      if (options.command === 'inspect') {
        print(await backend.inspect(key), inspectionText);
        return 0;
      }
      if (!options.yes && !(await confirmed(`remove every holder of this key on ${first}?`, io))) {
        io.stderr.write('dokebi-lock: force-release not confirmed (pass --yes to run it without asking)\n');
        return 2;
      }
      print(await backend.forceRelease(key), forcedText);
    }
    return 0;
  } catch (error) {
    if (error instanceof LockError) return fail(error);
    throw error;
  } finally {
    await provider?.close();
  }
}
