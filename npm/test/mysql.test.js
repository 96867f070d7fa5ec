// driver: mysql end to end through the JS API, against the machine's MariaDB
// (see mysql-server.js): leases, fences, waiters woken by the release
// poller, a hand-off to another process, withLock's renewals, every kind,
// status, errors and close, as every SQL store promises them
// (store-tests.js). Two providers in one process stand for two processes
// sharing a table; one test uses a real second process.
import { sqlStoreTests } from './store-tests.js';
import { MYSQL_URL, mysql, mysqlConfig, useTables } from './mysql-server.js';

/** The server's clock in µs, as the driver writes expiries. */
const NOW_US = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

sqlStoreTests({
  driver: 'mysql',
  backend: 'my',
  section: 'dokebi-mysql',
  server: 'MySQL',
  url: MYSQL_URL,
  foreignUrl: 'postgres://127.0.0.1:5432/test',
  place: 'table',
  fresh: useTables('lock'),
  config: mysqlConfig,
  liveHolders: (table) => mysql(`SELECT count(*) FROM ${table}_holders WHERE expires_at > ${NOW_US}`),
  namespaces: (table) => mysql(`SELECT CAST(ns AS CHAR) FROM ${table}`),
  wake: 'the release poller',
  wakeField: 'polling',
});
