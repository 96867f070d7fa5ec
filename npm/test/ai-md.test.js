// AI.md, the guide the seed points coding agents to, stays true: every ```js
// block runs against the real addon (from an app that installed the package)
// and prints what its `// →` comments say; every ```yaml block is valid
// options; blocks that cannot run say why. Redis blocks get a private server.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadOpenInput } from '../lib/options.js';
import { useRedis } from './redis-server.js';

const redis = useRedis();
const packageDir = fileURLToPath(new URL('..', import.meta.url));
const text = await readFile(join(packageDir, 'AI.md'), 'utf8');

/** `{ lang, info, code, line }` of every fenced block. */
function blocks(markdown) {
  const found = [];
  for (const match of markdown.matchAll(/^```(\S*)([^\n]*)\n([\s\S]*?)^```$/gm)) {
    const line = markdown.slice(0, match.index).split('\n').length;
    found.push({ lang: match[1], info: match[2].trim(), code: match[3], line });
  }
  return found;
}

/** What a block says it prints: the `// → …` comments, in order. */
function expectedOutput(code) {
  return [...code.matchAll(/\/\/ → (.*)$/gm)].map((match) => match[1].trimEnd());
}

/** An app directory with @dokebi/lock (this package), @dokebi/lock-redis and the OpenTelemetry SDK installed. */
async function appDir(t) {
  const root = await mkdtemp(join(tmpdir(), 'dokebi-lock-ai-md-'));
  t.after(() => rm(root, { recursive: true, force: true }));
  await writeFile(join(root, 'package.json'), '{ "name": "app", "type": "module" }\n');
  await mkdir(join(root, 'node_modules', '@dokebi'), { recursive: true });
  await symlink(packageDir, join(root, 'node_modules', '@dokebi', 'lock'), 'dir');
  await cp(join(packageDir, 'packages', 'lock-redis'), join(root, 'node_modules', '@dokebi', 'lock-redis'), { recursive: true });
  // The OpenTelemetry SDK of the tracing block: the package's devDependencies (npm/install).
  await symlink(join(packageDir, 'node_modules', '@opentelemetry'), join(root, 'node_modules', '@opentelemetry'), 'dir');
  return root;
}

const all = blocks(text);

test('AI.md has the sections the seed points to, and the package ships it', async () => {
  for (const heading of ['## 2. API', '## 3. Rules that matter', '## 4. Fencing done right', '## 5. Errors', '## 8. Extensions']) {
    assert.ok(text.includes(heading), heading);
  }
  const pkg = JSON.parse(await readFile(join(packageDir, 'package.json'), 'utf8'));
  assert.ok(pkg.files.includes('AI.md'));
  assert.ok(all.filter((block) => block.lang === 'js').length >= 5);
  for (const block of all) assert.ok(['js', 'yaml'].includes(block.lang), `AI.md:${block.line}: a ${block.lang || 'plain'} block is checked by nothing`);
});

test('every yaml block of AI.md is valid options', async () => {
  for (const block of all.filter((b) => b.lang === 'yaml')) {
    await assert.doesNotReject(loadOpenInput({ yaml: block.code }), `AI.md:${block.line}`);
  }
});

test('every js block of AI.md runs and prints what it says', async (t) => {
  const root = await appDir(t);
  for (const [index, block] of all.entries()) {
    if (block.lang !== 'js') continue;
    const file = join(root, `block-${index}.mjs`);
    await writeFile(file, block.code);
    const skip = block.info.match(/^not-runnable: (.+)$/);
    if (block.info !== '' && skip === null) assert.fail(`AI.md:${block.line}: unknown info "${block.info}" (use "not-runnable: <reason>")`);
    if (skip !== null) {
      // Still valid JavaScript.
      execFileSync(process.execPath, ['--check', file]);
      continue;
    }
    const run = spawnSync(process.execPath, [file], {
      cwd: root,
      env: { ...process.env, REDIS_URL: redis.url },
      encoding: 'utf8',
      timeout: 30_000,
    });
    assert.equal(run.status, 0, `AI.md:${block.line} failed:\n${run.stderr}`);
    const printed = run.stdout.split('\n').filter((line) => line !== '');
    assert.deepEqual(printed, expectedOutput(block.code), `AI.md:${block.line} printed other lines`);
  }
});
