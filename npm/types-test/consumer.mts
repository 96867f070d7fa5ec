// The types test: every export of @dokebi/lock, /host, /install and /otel, used as
// an app would. scripts/test-types type-checks this file as an ES module
// (consumer.mts) and, copied unchanged to a .cts, as CommonJS: the same
// text must compile from both (no top-level await, no import.meta). Each
// line marked as an expected error is misuse the declarations must reject.
import {
  createPlugin,
  defineLockPlugin,
  dependency,
  redisDependency,
  postgresDependency,
  mysqlDependency,
  DokebiError,
  LockError,
  LockExtension,
  LockProvider,
  openLock,
  type AcquireOptions,
  type AcquireTraceContext,
  type AppBackendOptions,
  type AppDriverSettings,
  type BackendOptions,
  type BackendStatus,
  type CreateDriverInput,
  type CreatePluginInput,
  type DriverBackend,
  type DriverFactory,
  type DriverInput,
  type FileBackendOptions,
  type ForcedRelease,
  type InspectedHolder,
  type Inspection,
  type KeysLease,
  type KindOptions,
  type PolicyBackend,
  type PolicyBackendOptions,
  type PolicyDefaultRuleOptions,
  type PolicyRuleOptions,
  type PolicyKeyStatus,
  type PolicyMember,
  type PolicyMemberStatus,
  type PolicyServed,
  type PolicyTier,
  type Lease,
  type LocalBackendOptions,
  type LockBackend,
  type LockConfig,
  type LockDriver,
  type LockDrivers,
  type LockErrorCode,
  type LockExtensionEntry,
  type LockKinds,
  type LockHttpAnswer,
  type LockLogger,
  type LockOptions,
  type HeldDetails,
  type LockPlugin,
  type OpenLockInput,
  type OptionIssue,
  type PluginContext,
  type PluginToken,
  type PostgresBackendOptions,
  type PostgresConnectionOptions,
  type PostgresOptions,
  type PostgresStatus,
  type MysqlBackendOptions,
  type MysqlConnectionOptions,
  type MysqlOptions,
  type MysqlStatus,
  type RedisBackendOptions,
  type RedisClusterOptions,
  type RedisConnectionCommon,
  type RedisConnectionOptions,
  type RedisOptions,
  type RedisSentinelOptions,
  type RedisTlsOptions,
  type RedisStatus,
  type TelemetryPayloads,
  type WithLockOptions,
  type WithLockTraceContext,
  type WrapBackendInput,
} from '@dokebi/lock';
import { createApp, type App, type HostLogger, type HostPlugin } from '@dokebi/lock/host';
import { check, manifest, planInstall, type InstallConfig, type InstallDiagnostic, type InstallPlan, type LockManifest } from '@dokebi/lock/install';
import { instrumentLocks, type InstrumentLocksOptions } from '@dokebi/lock/otel';

// An app driver's settings, declared so that its backends type-check.
declare module '@dokebi/lock' {
  interface AppDriverSettings {
    memory: { readonly size?: number };
  }
}

const local: LocalBackendOptions = { maxKeys: 10, waitTimeoutMs: 0, slowHoldMs: null };
const redis: RedisBackendOptions = { driver: 'redis', connection: 'main', leaseMs: 5000, replicaAcks: 1 };
const file: FileBackendOptions = { driver: 'file', directory: '/var/tmp/app-locks', pollIntervalMs: 25 };
const postgres: PostgresBackendOptions = { driver: 'postgres', connection: 'pg', leaseMs: 5000, schema: 'locks', autoCreate: false };
const pgConnection: PostgresConnectionOptions = { url: 'postgres://app@127.0.0.1:5432/app', listenUrl: 'postgres://app@db:5432/app', poolSize: 4 };
const mysql: MysqlBackendOptions = { driver: 'mysql', connection: 'my', leaseMs: 5000, table: 'app_locks', autoCreate: false };
const myConnection: MysqlConnectionOptions = { url: 'mysql://app@127.0.0.1:3306/app?ssl-mode=REQUIRED', poolSize: 4 };
const app: AppBackendOptions = { driver: 'memory', size: 3 };
const settings: AppDriverSettings['memory'] = { size: 1 };
const sentinel: RedisSentinelOptions = { nodes: ['redis://127.0.0.1:26379'], primaryName: 'main' };
const cluster: RedisClusterOptions = { nodes: ['redis://127.0.0.1:7000'] };
const common: RedisConnectionCommon = { commandTimeoutMs: 1000 };
const tls: RedisTlsOptions = { caFile: '/etc/ssl/private-ca.pem', certFile: 'client.pem', keyFile: 'client.key', servername: 'redis.internal' };
const connections: Record<string, RedisConnectionOptions> = {
  main: { url: 'redis://127.0.0.1:6379/0', ...common },
  s: { sentinel },
  c: { cluster },
  t: { url: 'rediss://redis.internal:6380/0', tls },
};
// @ts-expect-error tls settings are PEM text or file paths, not buffers
const bufferCa: RedisTlsOptions = { ca: new Uint8Array() };
const backends: Record<string, BackendOptions> = { local, redis, postgres, mysql, file, app, defaults: null, sized: { driver: 'memory', ...settings } };
const lockOptions: LockOptions = { backends, holder: 'orders-api/web-3' };
const redisOptions: RedisOptions = { connections };
const postgresOptions: PostgresOptions = { connections: { pg: pgConnection } };
const mysqlOptions: MysqlOptions = { connections: { my: myConnection } };
const config: LockConfig = {
  'dokebi-lock': lockOptions,
  'dokebi-redis': redisOptions,
  'dokebi-postgres': postgresOptions,
  'dokebi-mysql': mysqlOptions,
  'other-plugin': { x: 1 },
};

// @ts-expect-error a typo in a built-in backend's option
const typo: BackendOptions = { driver: 'redis', leasMs: 5000 };
// @ts-expect-error a typo in a local backend's option
const localTypo: BackendOptions = { driver: 'local', maxKey: 5 };
// @ts-expect-error a file backend needs its directory
const noDirectory: BackendOptions = { driver: 'file' };
// @ts-expect-error a redis backend needs leaseMs
const noLease: BackendOptions = { driver: 'redis' };
// @ts-expect-error a postgres backend needs leaseMs
const noPostgresLease: BackendOptions = { driver: 'postgres', connection: 'pg' };
// @ts-expect-error a mysql backend has a table, not a schema
const mysqlSchema: BackendOptions = { driver: 'mysql', connection: 'my', leaseMs: 5000, schema: 'locks' };
// @ts-expect-error a driver nobody declared
const undeclared: BackendOptions = { driver: 'sqlite', file: 'x.db' };
// @ts-expect-error a connection has one of url, sentinel and cluster
const twoConnections: RedisConnectionOptions = { url: 'redis://127.0.0.1', cluster };

const payments: PolicyRuleOptions = { prefix: 'pay:', backends: ['redis'] };
const everything: PolicyDefaultRuleOptions = { backends: ['local'] };
const tiers: PolicyBackendOptions = {
  driver: 'policy',
  reprobeCooldownMs: 5000,
  rules: [payments, { glob: 'report:*:daily', backends: ['redis', 'file'], minTier: 'host', onUnavailable: 'fallBack' }],
  default: everything,
};
// @ts-expect-error a rule has one of prefix and glob
const twoPatterns: PolicyBackendOptions = { driver: 'policy', rules: [{ prefix: 'a', glob: 'b*', backends: ['redis'] }], default: { backends: ['redis'] } };
// @ts-expect-error tiers are process, host and shared
const badTier: PolicyBackendOptions = { driver: 'policy', default: { backends: ['redis'], minTier: 'global' } };

async function inspectKey(backend: LockBackend): Promise<void> {
  const found: Inspection = await backend.inspect('order:42');
  const first: InspectedHolder | undefined = found.holders[0];
  const remaining: number | null | undefined = first?.remainingMs;
  const label: string | null | undefined = first?.label;
  const mode: 'exclusive' | 'shared' | null = found.mode;
  const fence: bigint | null = found.fence === null ? null : BigInt(found.fence);
  console.log(found.backend, found.held, found.waiting, remaining, label, mode, fence);
}

async function whoHeldIt(backend: LockBackend): Promise<void> {
  try {
    await backend.acquire('order:42', { waitTimeoutMs: 0 });
  } catch (error) {
    const held = (error as { details?: HeldDetails }).details;
    const labels: (string | null)[] = held?.holders.map((holder) => holder.label) ?? [];
    const index: number | undefined = held?.keyIndex;
    console.log(labels, held?.held, held?.waiting, index);
  }
}

function onWaitTimeout(event: TelemetryPayloads['wait-timeout']): string | null | undefined {
  return event.details?.holders[0]?.label;
}

async function breakKey(backend: LockBackend): Promise<void> {
  const forced: ForcedRelease = await backend.forceRelease('order:42');
  const fence: bigint | null = forced.fence === null ? null : BigInt(forced.fence);
  const removed: number = forced.removed;
  console.log(forced.backend, removed, fence);
  // @ts-expect-error forceRelease takes one key, not several
  await backend.forceRelease(['a', 'b']);
}

async function policy(provider: LockProvider): Promise<void> {
  const locks = provider.backend('tiers') as PolicyBackend;
  const lease = await locks.acquire('pay:1');
  const served: PolicyMember | undefined = lease.served;
  const tier: PolicyTier | undefined = served?.tier;
  const last: PolicyServed | null = locks.keyStatus('pay:1').last;
  const status: PolicyKeyStatus = locks.keyStatus('pay:1');
  const members: readonly PolicyMemberStatus[] | undefined = locks.status().members;
  console.log(tier, last?.servedAtMs, status.rule, status.last?.backend, members?.[0]?.skipped, tiers.driver);
}

const logger: LockLogger = { debug() {}, error(fields, message) { console.error(fields.backend, fields.code, message); } };

/** An app driver that supplies acquire only: the library adds withLock and status. */
class MemoryBackend implements DriverBackend {
  #inner: LockBackend;
  constructor(inner: LockBackend) {
    this.#inner = inner;
  }
  acquire(key: string, options?: AcquireOptions): Promise<Lease> {
    return this.#inner.acquire(key, options);
  }
}

const memory: DriverFactory = async (input: DriverInput): Promise<LockDriver> => {
  const inner = await openLock({ config: { 'dokebi-lock': { backends: { m: {} } } }, logger: input.logger });
  const size = input.settings.size;
  if (size !== undefined && typeof size !== 'number') {
    const issue: OptionIssue = { path: `${input.path}.size`, message: 'must be a number' };
    throw new LockError('INVALID_OPTIONS', 'invalid options', { details: { issues: [issue] } });
  }
  input.getDependency?.(dependency);
  return { view: new MemoryBackend(inner.backend('m')), close: () => inner.close() };
};
const drivers: LockDrivers = { memory };

// @ts-expect-error a driver's view must have acquire
const noAcquire: LockDriver = { view: {}, close: async () => {} };
// @ts-expect-error a driver factory returns { view, close }
const badFactory: DriverFactory = () => ({ view: new MemoryBackend(undefined as unknown as LockBackend) });

/** A wrapper passing every kind on to the backend it wraps: it declares them and takes a key array. */
class KeysBackend implements DriverBackend {
  readonly kinds: LockKinds = { shared: true, limit: true, keys: true };
  readonly #inner: LockBackend;
  constructor(inner: LockBackend) {
    this.#inner = inner;
  }
  acquire(key: string | readonly string[], options?: AcquireOptions): Promise<Lease> {
    const mode: 'exclusive' | 'shared' | undefined = options?.mode;
    console.log(mode);
    return this.#inner.acquire(key, options);
  }
}
const keysDriver: LockDriver = { view: new KeysBackend(undefined as unknown as LockBackend), close: async () => {} };
const countedOptions: KindOptions = { limit: 5, weight: 2 };
// @ts-expect-error a kind the library does not know
const unknownKind: LockKinds = { readers: true };
// @ts-expect-error a kind is declared with a boolean
const wordyKind: DriverBackend = { kinds: { shared: 'yes' }, acquire: (key: string) => Promise.reject(key) };
// @ts-expect-error a mode is 'exclusive' or 'shared'
const badMode: KindOptions = { mode: 'weird' };

class Metered implements DriverBackend {
  acquired = 0;
  readonly #inner: LockBackend;
  constructor(inner: LockBackend) {
    this.#inner = inner;
  }
  async acquire(key: string, options?: AcquireOptions): Promise<Lease> {
    const lease = await this.#inner.acquire(key, options);
    this.acquired++;
    return lease;
  }
}

class AppExtension extends LockExtension {
  protected override dependencies(): readonly PluginToken[] {
    return [dependency, redisDependency, postgresDependency, mysqlDependency];
  }
  protected override createDriver(input: CreateDriverInput): Promise<LockDriver> {
    return input.driver === 'memory' ? Promise.resolve(memory(input)) : input.open();
  }
  protected override wrapBackend({ name, driver, backend }: WrapBackendInput): DriverBackend {
    // The backend a hook gets has the whole API.
    const status: BackendStatus = backend.status();
    console.log(name, driver, status.driver);
    return new Metered(backend);
  }
}

class WrongHook extends LockExtension {
  // @ts-expect-error wrapBackend returns a backend, not a string
  protected override wrapBackend(input: WrapBackendInput): string {
    return input.name;
  }
}

class WrongInput extends LockExtension {
  // @ts-expect-error createDriver takes the CreateDriverInput
  protected override createDriver(input: number): Promise<LockDriver> {
    return Promise.reject(input);
  }
}

const entry: LockExtensionEntry = { default: AppExtension, drivers };

async function standalone(): Promise<void> {
  const input: OpenLockInput = { config, logger, drivers, entry };
  const provider: LockProvider = await openLock(input);
  const backend: LockBackend = provider.backend('sized');
  const signal: AbortSignal = AbortSignal.timeout(1000);
  const acquireOptions: AcquireOptions = { signal, waitTimeoutMs: 10, holder: 'job-7' };
  {
    await using lease = await backend.acquire('k', acquireOptions);
    const fence: bigint = BigInt(lease.fence);
    const left: number = lease.remainingMs;
    console.log(lease.key, lease.valid, fence, left, await lease.renew());
  }
  const withLockOptions: WithLockOptions = { ...acquireOptions, autoRenew: false };
  const total: number = await backend.withLock('k', async (lease, section) => (section.aborted ? 0 : Number(lease.fence)), withLockOptions);
  const text: string = await backend.withLock('k', () => 'sync value');
  // @ts-expect-error withLock resolves with fn's value
  const wrong: number = await backend.withLock('k', () => 'text');
  // @ts-expect-error an unknown acquire option
  await backend.acquire('k', { waitTimeout: 5 });
  // Lock kinds: a lease of several keys has its keys and a fence per key; a lease of one has neither.
  const keysLease: KeysLease = await backend.acquire(['from', 'to'], { mode: 'shared', waitTimeoutMs: 10 });
  const toFence: string | undefined = keysLease.fences.get('to');
  const counted: Lease = await backend.acquire('exports', { limit: 5, weight: 2 });
  // @ts-expect-error fences exist only on a lease of several keys
  console.log(counted.fences);
  // @ts-expect-error a mode is 'exclusive' or 'shared'
  await backend.acquire('k', { mode: 'weird' });
  const keyCount: number = await backend.withLock(['a', 'b'], (lease) => lease.keys.length, { limit: 2 });
  const someKeys: string | readonly string[] = Math.random() > 0.5 ? 'k' : ['a', 'b'];
  const either: Lease = await backend.acquire(someKeys);
  console.log(toFence, keyCount, either.fence);
  const status: BackendStatus = backend.status();
  // The members of the wrapBackend result (Metered) stay on the backend users get.
  const acquiredSoFar: number = (provider.backend('sized') as LockBackend & Metered).acquired;
  const held: number | null = status.held;
  const redisStatus: RedisStatus | undefined = provider.status().redis?.redis;
  const postgresStatus: PostgresStatus | undefined = provider.status().pg?.postgres;
  const mysqlStatus: MysqlStatus | undefined = provider.status().mysql?.mysql;
  console.log(total, text, wrong, acquiredSoFar, held, redisStatus?.connected, postgresStatus?.listening, mysqlStatus?.polling, provider.names());
  await provider.close();
  await provider[Symbol.asyncDispose]();
  // @ts-expect-error a provider comes from openLock or a plugin
  new LockProvider();
  await openLock({ file: new URL('file:///app/dokebi.yaml') });
  await openLock({ yaml: 'schemaVersion: 1\n' });
  // @ts-expect-error exactly one of yaml, file and config
  await openLock({ yaml: '', config });
}

function errors(error: unknown): LockHttpAnswer | undefined {
  // Other packages classify any DokebiError by its code.
  if (error instanceof DokebiError && !(error instanceof LockError)) console.log(error.plugin, error.code, error.data?.reason);
  if (!(error instanceof LockError)) return undefined;
  const base: DokebiError = error;
  const code: LockErrorCode = error.code;
  const issues: readonly OptionIssue[] | undefined = error.details?.issues;
  console.log(code, error.fix, error.plugin, error.name, issues, base.data?.reason);
  // @ts-expect-error not an error code
  const unknownCode: LockErrorCode = 'LOCK_TIMEOUT';
  // @ts-expect-error not an error code
  new LockError('TIMEOUT', 'message');
  return error.http ?? (unknownCode ? undefined : undefined);
}

const telemetry = (payload: TelemetryPayloads['slow-acquire']): number => payload.waitedMs;
const forcedReleases = (payload: TelemetryPayloads['forced-release']): string => {
  // @ts-expect-error the payload carries no key
  const key: string = payload.key;
  return `${payload.backend} ${payload.removed} ${payload.fence ?? 'local'} ${key}`;
};

/** A tracingChannel subscriber of the acquires and holds, and the OpenTelemetry subpath. */
function tracing(provider: LockProvider): () => void {
  const waited = (context: AcquireTraceContext): string => `${context.backend} ${context.waitMs ?? 0} ${context.fence ?? ''} ${context.heldMs ?? ''}`;
  const section = (context: WithLockTraceContext): string | undefined => context.code;
  // @ts-expect-error the context carries no key
  const leaked = (context: AcquireTraceContext): string => context.key;
  const options: InstrumentLocksOptions = { backends: provider };
  // @ts-expect-error backends is a provider or backends by name, not a list
  instrumentLocks({ backends: [provider.backend('orders')] });
  console.log(waited, section, leaked);
  return instrumentLocks(options);
}

async function hosted(): Promise<void> {
  const hostLogger: HostLogger = { debug() {}, error() {} };
  const host: App = createApp({ config, logger: hostLogger });
  const pluginInput: CreatePluginInput = { app: host, entry };
  const plugin: LockPlugin = createPlugin(pluginInput);
  const consumer: HostPlugin<string> = {
    name: 'consumer',
    metadata: { dependencies: [dependency] },
    start(context: PluginContext) {
      return context.getDependency<LockProvider>(dependency).names().join(',');
    },
  };
  host.register(plugin).register(consumer);
  const withDrivers: LockPlugin = defineLockPlugin({ drivers })({ app: { config }, options: lockOptions });
  await host.start();
  const provider: LockProvider = host.get(plugin);
  console.log(provider.names(), host.get(consumer), withDrivers.name, plugin.metadata.dependencies);
  await host.stop();
}

function install(): void {
  const installConfig: InstallConfig = lockOptions;
  const plan: InstallPlan = planInstall(installConfig);
  const diagnostics: readonly InstallDiagnostic[] = check(config, { dependencies: { '@dokebi/lock': '^0.4.0' } }).diagnostics;
  const shipped: LockManifest = manifest;
  console.log(plan.packages, diagnostics.length, shipped.schemaVersion);
}

export { inspectKey, whoHeldIt, onWaitTimeout, breakKey, policy, twoPatterns, badTier, standalone, errors, telemetry, forcedReleases, tracing, hosted, install, typo, localTypo, noDirectory, noLease, undeclared, twoConnections, bufferCa, noAcquire, badFactory, keysDriver, countedOptions, unknownKind, wordyKind, badMode, WrongHook, WrongInput };
