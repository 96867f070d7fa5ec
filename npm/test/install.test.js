// @dokebi/lock/install: planInstall, check and the manifest, imported by the
// package's own name as the dokebi CLI does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { check, manifest, planInstall } from '@dokebi/lock/install';

const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'));

const localOnly = { backends: { orders: { driver: 'local' }, jobs: {} } };
const withRedis = {
  backends: {
    orders: {},
    shared: { driver: 'redis', connection: 'main', leaseMs: 10000 },
    cache: { driver: 'redis', leaseMs: 1000 },
  },
};

test('planInstall requires dokebi-redis and @dokebi/lock-redis only with a redis backend', () => {
  assert.deepEqual(planInstall(localOnly).requires, []);
  assert.deepEqual(planInstall(localOnly).packages, []);
  assert.deepEqual(planInstall(withRedis).requires, ['dokebi-redis']);
  assert.deepEqual(planInstall(withRedis).packages, ['@dokebi/lock-redis']);
  // The whole options map is accepted too.
  assert.deepEqual(planInstall({ 'dokebi-lock': withRedis }).requires, ['dokebi-redis']);
  assert.deepEqual(planInstall(undefined).requires, []);
});

test('planInstall creates the user-owned entry file from the shipped template', () => {
  const [file] = planInstall(localOnly).files;
  assert.equal(file.path, 'src/infra/lock/extension.ts');
  assert.equal(file.owner, 'user');
  assert.match(readFileSync(file.template, 'utf8'), /export default class AppLockExtension extends LockExtension \{\}/);
});

test('check reports DRIVER_PACKAGE_MISSING per redis backend when package.json lacks @dokebi/lock-redis', () => {
  const missing = check(withRedis, { dependencies: { '@dokebi/lock': '0.4.1' }, devDependencies: { '@dokebi/lock-redis': '0.4.1' } });
  assert.deepEqual(missing.requires, ['dokebi-redis']);
  assert.deepEqual(
    missing.diagnostics.map(({ level, code, path, fix }) => ({ level, code, path, fix })),
    [
      { level: 'error', code: 'DRIVER_PACKAGE_MISSING', path: 'backends.shared.driver', fix: 'npm install @dokebi/lock-redis' },
      { level: 'error', code: 'DRIVER_PACKAGE_MISSING', path: 'backends.cache.driver', fix: 'npm install @dokebi/lock-redis' },
    ],
  );
  assert.deepEqual(check(withRedis, { dependencies: { '@dokebi/lock-redis': '0.4.1' } }).diagnostics, []);
  assert.deepEqual(check(withRedis, { optionalDependencies: { '@dokebi/lock-redis': '0.4.1' } }).diagnostics, []);
  assert.deepEqual(check(localOnly, {}), { requires: [], diagnostics: [] });
});

test('the manifest is schemaVersion 2 and declares dokebi-redis, dokebi-postgres and dokebi-mysql optional', () => {
  assert.equal(manifest.schemaVersion, 2);
  assert.equal(manifest.version, pkg.version);
  assert.deepEqual(
    manifest.dependencies.map(({ plugin, optional }) => ({ plugin, optional })),
    [
      { plugin: 'dokebi-redis', optional: true },
      { plugin: 'dokebi-postgres', optional: true },
      { plugin: 'dokebi-mysql', optional: true },
    ],
  );
  assert.equal(createRequire(import.meta.url)('@dokebi/lock/dokebi.manifest.json').schemaVersion, 2);
});

test('the driver packages and @opentelemetry/api (of @dokebi/lock/otel) are optional peers, and the marker package matches the version', () => {
  assert.deepEqual(pkg.peerDependenciesMeta, {
    '@dokebi/redis': { optional: true },
    '@dokebi/lock-redis': { optional: true },
    '@dokebi/postgres': { optional: true },
    '@dokebi/lock-postgres': { optional: true },
    '@dokebi/mysql': { optional: true },
    '@dokebi/lock-mysql': { optional: true },
    '@opentelemetry/api': { optional: true },
  });
  assert.deepEqual(Object.keys(pkg.peerDependencies).sort(), Object.keys(pkg.peerDependenciesMeta).sort());
  const marker = JSON.parse(readFileSync(new URL('../packages/lock-redis/package.json', import.meta.url), 'utf8'));
  assert.equal(marker.name, '@dokebi/lock-redis');
  assert.equal(marker.version, pkg.version);
  assert.equal(pkg.peerDependencies['@dokebi/lock-redis'], marker.version);
  for (const file of ['install.js', 'install.d.ts', 'dokebi.manifest.json', 'templates/']) assert.ok(pkg.files.includes(file), file);
});

test('require() loads the install module too', () => {
  const install = createRequire(import.meta.url)('@dokebi/lock/install');
  assert.equal(install.planInstall, planInstall);
});
