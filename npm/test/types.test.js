// The TypeScript option types agree with options.schema.json.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { OUTPUT, readSchema, render } from '../scripts/options-types.js';

test('options.d.ts is generated from the current options.schema.json', () => {
  assert.equal(readFileSync(OUTPUT, 'utf8'), render(readSchema()), 'run: node npm/scripts/options-types.js');
});

test('every backend and connection field of the schema is typed', () => {
  const types = readFileSync(OUTPUT, 'utf8');
  const options = readSchema().properties.options.properties;
  const [local, redis] = options['dokebi-lock'].properties.backends.additionalProperties.anyOf;
  const connection = options['dokebi-redis'].properties.connections.additionalProperties;
  for (const schema of [local, redis, connection]) {
    for (const field of Object.keys(schema.properties)) assert.match(types, new RegExp(`readonly ${field}\\??: `));
  }
});

test('LockErrorCode in index.d.ts lists exactly the core error codes and the loader\'s own (lib/native.js)', async () => {
  const { native } = await import('../lib/native.js');
  const declared = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
  const union = declared.slice(declared.indexOf('export type LockErrorCode'), declared.indexOf(';', declared.indexOf('export type LockErrorCode')));
  const codes = [...union.matchAll(/'([A-Z_]+)'/g)].map((m) => m[1]).sort();
  const loader = ['PLATFORM_UNSUPPORTED', 'PLATFORM_PACKAGE_MISSING', 'ADDON_VERSION_MISMATCH'];
  assert.deepEqual(codes, [...native.errorCodes().map((c) => c.code), ...loader].sort());
});

test('require gets its own declarations (.d.cts) naming every value export of the module, for the package and each subpath', async () => {
  const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));
  for (const [subpath, module] of [['.', 'index'], ['./host', 'host'], ['./install', 'install'], ['./otel', 'otel']]) {
    const { import: esm, require: cjs } = pkg.exports[subpath];
    assert.equal(esm.types, `./${module}.d.ts`);
    assert.equal(cjs.types, `./${module}.d.cts`);
    for (const file of [esm.types, cjs.types]) assert.ok(pkg.files.includes(file.slice(2)), `${file} is packed`);
    const declared = readFileSync(new URL(`../${module}.d.cts`, import.meta.url), 'utf8');
    const values = [...declared.matchAll(/^export declare const (\w+)/gm)].map((m) => m[1]).sort();
    const runtime = Object.keys(await import(`../${esm.default.slice(2)}`)).sort();
    assert.deepEqual(values, runtime, `${module}.d.cts declares every value export`);
    assert.match(declared, new RegExp(`^export type \\* from './${module}.js' with \\{ 'resolution-mode': 'import' \\};$`, 'm'));
  }
});

test('index.d.ts brings Node\'s types (AbortSignal, URL) itself', () => {
  const declared = readFileSync(new URL('../index.d.ts', import.meta.url), 'utf8');
  assert.match(declared, /^\/\/\/ <reference types="node" \/>$/m);
});

test('the types test (types-test/consumer.mts) uses every export of the declarations', () => {
  const consumer = readFileSync(new URL('../types-test/consumer.mts', import.meta.url), 'utf8');
  for (const file of ['index.d.ts', 'options.d.ts', 'host.d.ts', 'install.d.ts', 'otel.d.ts']) {
    const declared = readFileSync(new URL(`../${file}`, import.meta.url), 'utf8');
    for (const [, name] of declared.matchAll(/^export (?:declare )?(?:interface|type|class|function|const) (\w+)/gm)) {
      assert.match(consumer, new RegExp(`\\b${name}\\b`), `consumer.mts does not use ${name} of ${file}`);
    }
  }
});
