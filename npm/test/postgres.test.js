// driver: postgres end to end through the JS API, against the machine's
// PostgreSQL (see postgres-server.js): leases, fences, waiters woken by
// LISTEN, a hand-off to another process, withLock's renewals, every kind,
// status, errors and close, as every SQL store promises them
// (store-tests.js). Two providers stand for two processes sharing a table;
// one test uses a real second process.
import { sqlStoreTests } from './store-tests.js';
import { PG_URL, postgresConfig, psql, useSchemas } from './postgres-server.js';

sqlStoreTests({
  driver: 'postgres',
  backend: 'pg',
  section: 'dokebi-postgres',
  server: 'PostgreSQL',
  url: PG_URL,
  foreignUrl: 'redis://127.0.0.1:6379/0',
  place: 'schema',
  fresh: useSchemas('lock'),
  config: postgresConfig,
  liveHolders: (schema) => psql(`SELECT count(*) FROM ${schema}.dokebi_lock_holders WHERE expires_at > now()`),
  namespaces: (schema) => psql(`SELECT namespace FROM ${schema}.dokebi_lock`),
  wake: 'LISTEN',
  wakeField: 'listening',
});
