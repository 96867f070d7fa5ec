//! Where the workers' lock lives: one redis-server (every scenario but two),
//! a Sentinel deployment (`sentinel-failover`) or a Redis Cluster
//! (`cluster-failover`), and the failover those two scenarios inject: the
//! primary (of the Sentinel deployment, or of the slot of `k0`'s lock key)
//! is killed with SIGKILL once, while a worker holds a lease, and the
//! harness waits until a replica took over. Or, in the `pg-*` scenarios,
//! the machine's PostgreSQL (a schema of the scenario's own, dropped after)
//! or, where it crashes or fails over, a private PostgreSQL (and its standby);
//! in the `file-*` ones, lock files in a directory of the scenario's own;
//! in the `mysql-*` ones, a private MariaDB (and its replica).

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::check::Rule;
use crate::cluster::Cluster;
use crate::log::{mono_us, Hold};
use crate::mysql_server::{PrivateServer as MysqlServer, GRANTS};
use crate::postgres;
use crate::postgres_server::PrivateServer;
use crate::proxy::Proxy;
use crate::redis_server::RedisServer;
use crate::sentinel::Sentinels;
use crate::worker;

pub enum Lock {
    Server(RedisServer),
    Sentinel(Sentinels),
    Cluster(Cluster),
    Postgres(PgLock),
    /// The file driver: lock files in this directory.
    File(PathBuf),
    /// A policy backend (the `policy-*` scenarios) over a redis-server, the
    /// member every rule prefers, and the machine's PostgreSQL, which the
    /// fallback rules fall back to (see [`POLICY_RULES`]).
    Policy(RedisServer, PgLock),
    Mysql(MyLock),
}

/// The policy scenarios' rules, tried in order, the default last: `k0` is
/// like a `pay:` name, served by Redis only; the others fall back.
pub const POLICY_RULES: &[Rule] = &[
    Rule { label: "rules[0]", prefix: "k0", fall_back: false },
    Rule { label: "rules[1]", prefix: "k1", fall_back: true },
    Rule { label: "default", prefix: "", fall_back: true },
];
/// The members of the policy scenarios' backend.
pub const PREFERRED: &str = "redis";
const FALLBACK: &str = "postgres";
/// How long the policy passes over a member found unavailable: short, so
/// that a 3 s run sees the fallback names go back to Redis.
pub const REPROBE_COOLDOWN_MS: u64 = 500;
/// The policy's wait: short, so that contention sometimes ends an acquire
/// (`WAIT_TIMEOUT`), which must never move it to the other member. Not
/// shorter: a wait that runs out while a process's first connect to Redis is
/// under way ends that try `PROVIDER_FAILED`, which the policy takes for
/// unavailability and falls back (at 30 ms, seen on a loaded host: keys served
/// by PostgreSQL while Redis served the others, before any fault).
const POLICY_WAIT_MS: u32 = 100;
/// Every worker connection's `commandTimeoutMs`.
const COMMAND_TIMEOUT_MS: u64 = 800;
/// The workers' `waitTimeoutMs` (but the policy's): three of the suite's
/// 1 s leases, so a wait outlasts a holder killed or stopped in its section.
pub const WAIT_TIMEOUT_MS: u64 = 3000;

/// The postgres scenarios' lock: the driver's tables in `schema` of the
/// machine's PostgreSQL, or of a private server the scenario crashes
/// (`server`), every worker session named `application` (so that the
/// harness can end them).
pub struct PgLock {
    pub schema: String,
    pub application: String,
    server: Option<PrivateServer>,
    /// An asynchronous streaming standby of `server`, until promoted, and
    /// the proxy it streams through.
    standby: Option<(PrivateServer, Proxy)>,
}

/// The machine's PostgreSQL (tests/postgres/mod.rs), where the workers go
/// unless a proxy or a private server stands in for it.
const PG_PORT: u16 = 5432;

impl PgLock {
    pub fn new(scenario: &str) -> PgLock {
        let lock = PgLock::on(scenario, None);
        postgres::batch(&format!("DROP SCHEMA IF EXISTS {} CASCADE", lock.schema));
        lock
    }

    /// The lock on a private server of its own (grants committed
    /// synchronously, its default), which [`PgLock::crash_and_recover`] crashes.
    pub fn private(scenario: &str) -> PgLock {
        PgLock::on(scenario, Some(PrivateServer::start(&format!("faults-{scenario}"), &[])))
    }

    /// [`PgLock::private`] with an asynchronous streaming standby
    /// (`pg_basebackup -R`) fed through a proxy, which
    /// [`PgLock::promote_standby`] promotes.
    pub fn with_standby(scenario: &str) -> PgLock {
        let mut lock = PgLock::private(scenario);
        let primary = lock.server.as_ref().expect("a private server");
        let link = Proxy::start(primary.port(), Duration::ZERO);
        lock.standby = Some((primary.standby_through(&format!("faults-{scenario}-standby"), link.port()), link));
        lock
    }

    /// Stops the standby's replication link forwarding: it lags behind.
    pub fn hold_standby(&self) {
        if let Some((_, link)) = &self.standby {
            link.hold();
        }
    }

    fn on(scenario: &str, server: Option<PrivateServer>) -> PgLock {
        let schema = format!("faults_{}_{}", std::process::id(), scenario.replace('-', "_"));
        PgLock { schema, application: format!("faults_{}", std::process::id()), server, standby: None }
    }

    /// The URL of the lock's server, for the harness's own queries.
    fn url(&self) -> String {
        self.server.as_ref().map_or_else(postgres::url, PrivateServer::url)
    }

    fn port(&self) -> u16 {
        self.server.as_ref().map_or(PG_PORT, PrivateServer::port)
    }

    /// The database the workers use.
    fn database(&self) -> &'static str {
        if self.server.is_some() {
            "postgres"
        } else {
            "test"
        }
    }

    /// Ends every session of the workers; answers how many there were.
    pub fn terminate_sessions(&self) -> i64 {
        postgres::terminate_sessions_on(&self.url(), &self.application)
    }

    /// Crashes the primary and promotes its standby, which may not have
    /// received the last grants (it streams asynchronously); answers the
    /// new primary's port, or `None` once the standby was promoted.
    pub fn promote_standby(&mut self) -> Option<u16> {
        let (standby, _link) = self.standby.take()?;
        // The scenario is a failover that lost grants only if the standby
        // lags: WAL the primary wrote that it never received.
        let written = postgres::count_on(&self.url(), "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint");
        let received = postgres::count_on(&standby.url(), "SELECT pg_wal_lsn_diff(pg_last_wal_receive_lsn(), '0/0')::bigint");
        assert!(written > received, "the standby was to lag behind the primary (received {received} of {written} bytes of WAL)");
        self.server.as_mut().expect("a private server").crash();
        standby.promote();
        let port = standby.port();
        // The old primary goes, with its data directory.
        self.server = Some(standby);
        Some(port)
    }

    /// Its live holder and waiting rows in `namespace`.
    fn left_behind(&self, namespace: &str) -> usize {
        postgres::count_on(
            &self.url(),
            &format!(
                "SELECT (SELECT count(*) FROM {0}.dokebi_lock_holders WHERE namespace = '{namespace}' AND expires_at > now())
                  + (SELECT count(*) FROM {0}.dokebi_lock_waiting WHERE namespace = '{namespace}' AND lapses_at > now())",
                self.schema
            ),
        ) as usize
    }

    /// Crashes the private server (`pg_ctl stop -m immediate`: no
    /// checkpoint) and starts it again, recovering from its WAL.
    pub fn crash_and_recover(&mut self) {
        let server = self.server.as_mut().expect("a crash needs the lock on a private server");
        server.crash();
        server.start_again();
    }
}

/// The lock keys in `namespace` among a Redis server's `keys`.
fn redis_locks(keys: Vec<String>, namespace: &str) -> usize {
    keys.into_iter().filter(|k| k.starts_with(&format!("{namespace}:lock:"))).count()
}

impl Drop for PgLock {
    fn drop(&mut self) {
        // A private server goes with its data directory.
        if self.server.is_none() {
            postgres::batch(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
        }
    }
}

/// The mysql scenarios' lock: the driver's tables (their default names) in
/// database `test` of a private MariaDB, which the scenario crashes or
/// whose workers' connections it ends, and, for a failover, a replica fed
/// through a proxy.
pub struct MyLock {
    server: MysqlServer,
    /// The replica, until promoted, and the proxy it replicates through.
    replica: Option<(MysqlServer, Proxy)>,
}

impl MyLock {
    /// A private server with MariaDB's defaults: each grant's commit waits
    /// for its redo log flush (`innodb_flush_log_at_trx_commit = 1`).
    pub fn private() -> MyLock {
        MyLock { server: MysqlServer::start(&[]), replica: None }
    }

    /// A primary (binary log by rows, flushed at each commit) with a
    /// replica replicating through a proxy: asynchronously, or, with
    /// `semisync`, semi-synchronously (a commit is answered once the
    /// replica received it; lossless: the primary waits before it commits,
    /// and never gives up waiting within a run).
    pub fn with_replica(semisync: bool) -> MyLock {
        let server = MysqlServer::start(&[GRANTS, "--log-bin", "--server-id=1", "--binlog-format=ROW", "--sync-binlog=1"]);
        let link = Proxy::start(server.port(), Duration::ZERO);
        let replica = server.replica_through(link.port(), if semisync { &["--rpl-semi-sync-slave-enabled=ON"] } else { &[] });
        if semisync {
            server.replicate_semi_synchronously(&replica);
        }
        MyLock { server, replica: Some((replica, link)) }
    }

    fn port(&self) -> u16 {
        self.server.port()
    }

    /// Kills the server (SIGKILL) and starts it again on its data; answers
    /// whether InnoDB recovered from its redo log, as only a crash makes it
    /// (the proof that the server did crash).
    fn crash_and_recover(&mut self) -> bool {
        let recoveries = |server: &MysqlServer| server.log().matches("Starting crash recovery").count();
        let before = recoveries(&self.server);
        self.server.crash_and_restart();
        recoveries(&self.server) > before
    }

    /// Stops the replica's link forwarding: it receives nothing more.
    fn hold_replica(&self) {
        if let Some((_, link)) = &self.replica {
            link.hold();
        }
    }

    /// Crashes the primary and promotes its replica, checked to lag behind
    /// it; answers the new primary's port, or `None` once it was promoted.
    fn promote_replica(&mut self) -> Option<u16> {
        let (replica, _link) = self.replica.take()?;
        assert!(replica.lag_behind(&self.server), "the replica was to lag behind the primary");
        self.server.crash();
        replica.promote();
        let port = replica.port();
        // The old primary goes, with its data directory.
        self.server = replica;
        Some(port)
    }

    /// Each key's last fence, as the key table keeps it.
    fn fences(&self) -> BTreeMap<String, u128> {
        let rows = self.server.rows("SELECT CAST(k AS CHAR), CAST(fence AS CHAR) FROM test.dokebi_lock").expect("the lock server answers");
        rows.into_iter().map(|row| (row[0].clone(), row[1].parse().unwrap())).collect()
    }

    /// Its live holder rows, and waiting rows not lapsed.
    fn left_behind(&self) -> usize {
        const NOW: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";
        self.server
            .sql(&format!(
                "SELECT (SELECT COUNT(*) FROM test.dokebi_lock_holders WHERE expires_at > {NOW})
                      + (SELECT COUNT(*) FROM test.dokebi_lock_waiting WHERE lapses_at > {NOW})"
            ))
            .expect("the lock server answers") as usize
    }
}

/// One primary killed during a run.
pub struct Failover {
    /// When it was killed (`CLOCK_MONOTONIC`, µs).
    pub killed_at: u64,
    /// The workers' keys whose lock lived on it (all of them with Sentinel).
    pub keys: Vec<String>,
    /// How long until a replica took over, as the harness saw it.
    pub took_over: Duration,
}

impl Lock {
    /// The single server (the scenarios that use one; a policy's Redis member).
    pub fn server(&self) -> &RedisServer {
        match self {
            Lock::Server(server) | Lock::Policy(server, _) => server,
            _ => panic!("this scenario's lock is not a single server"),
        }
    }

    pub fn server_mut(&mut self) -> &mut RedisServer {
        match self {
            Lock::Server(server) | Lock::Policy(server, _) => server,
            _ => panic!("this scenario's lock is not a single server"),
        }
    }

    /// The port a proxy in front of the (single) lock server forwards to.
    pub fn port(&self) -> u16 {
        match self {
            Lock::Postgres(lock) => lock.port(),
            Lock::Mysql(lock) => lock.port(),
            _ => self.server().port(),
        }
    }

    /// Crashes the private SQL server and starts it again, recovering from
    /// its log (PostgreSQL: its WAL; MariaDB: InnoDB's redo log); answers
    /// whether it crashed (`pg_ctl stop -m immediate` fails on a server
    /// that is not running).
    pub fn crash_and_recover(&mut self) -> bool {
        match self {
            Lock::Postgres(lock) => {
                lock.crash_and_recover();
                true
            }
            Lock::Mysql(lock) => lock.crash_and_recover(),
            _ => panic!("only a private SQL server crashes"),
        }
    }

    /// Ends every connection of the workers from the server's side
    /// (`pg_terminate_backend`, `KILL`); answers how, and how many, when
    /// it ended any.
    pub fn end_sessions(&self) -> Option<String> {
        let (how, ended) = match self {
            Lock::Postgres(lock) => ("pg_terminate_backend", lock.terminate_sessions() as usize),
            Lock::Mysql(lock) => ("KILL", lock.server.kill_clients()),
            _ => panic!("only a SQL server's sessions are ended"),
        };
        (ended > 0).then(|| format!("{how}: {ended} sessions"))
    }

    /// Each key's last fence on a mysql lock's server (`None` elsewhere).
    pub fn fences(&self) -> Option<BTreeMap<String, u128>> {
        match self {
            Lock::Mysql(lock) => Some(lock.fences()),
            _ => None,
        }
    }

    /// Stops the SQL server's replica (standby) receiving: it lags behind.
    pub fn hold_replica(&self) {
        match self {
            Lock::Postgres(lock) => lock.hold_standby(),
            Lock::Mysql(lock) => lock.hold_replica(),
            _ => panic!("only a SQL server's replica is held here"),
        }
    }

    /// Crashes the SQL server's primary and promotes its lagging replica
    /// (standby); answers the new primary's port, or `None` once promoted.
    pub fn promote_replica(&mut self) -> Option<u16> {
        match self {
            Lock::Postgres(lock) => lock.promote_standby(),
            Lock::Mysql(lock) => lock.promote_replica(),
            _ => panic!("only a SQL server's replica is promoted here"),
        }
    }

    /// The workers' options (see `worker::yaml`); `proxy` (a port) stands
    /// in front of the single server.
    pub fn worker_yaml(&self, proxy: Option<u16>, namespace: &str, lease_ms: u32) -> String {
        let common = format!("namespace: {namespace}, waitTimeoutMs: {WAIT_TIMEOUT_MS}, pollIntervalMs: 20");
        let connection = |driver: &str, endpoint: String| {
            format!("  dokebi-{driver}:\n    connections:\n      main:\n        connectTimeoutMs: 500\n        commandTimeoutMs: {COMMAND_TIMEOUT_MS}\n        {endpoint}\n")
        };
        let postgres = |lock: &PgLock| {
            (
                format!("driver: postgres, connection: main, schema: {}", lock.schema),
                connection(
                    "postgres",
                    format!(
                        "url: \"postgres://postgres@127.0.0.1:{}/{}?sslmode=disable&application_name={}\"",
                        proxy.unwrap_or(lock.port()),
                        lock.database(),
                        lock.application
                    ),
                ),
            )
        };
        let (backend, driver) = match self {
            Lock::Server(server) => {
                let url = proxy.map_or_else(|| server.url(), |port| format!("redis://127.0.0.1:{port}/0"));
                ("driver: redis, connection: main".to_owned(), connection("redis", format!("url: \"{url}\"")))
            }
            Lock::Sentinel(sentinels) => ("driver: redis, connection: main".to_owned(), connection("redis", sentinels.endpoint_yaml())),
            Lock::Cluster(cluster) => ("driver: redis, connection: main".to_owned(), connection("redis", cluster.endpoint_yaml())),
            Lock::Postgres(lock) => postgres(lock),
            Lock::Mysql(lock) => (
                "driver: mysql, connection: main".to_owned(),
                connection("mysql", format!("url: \"mysql://root@127.0.0.1:{}/test\"", proxy.unwrap_or(lock.port()))),
            ),
            // No lease: a kernel lock lasts as long as its holder.
            Lock::File(directory) => {
                return worker::yaml(&[("faults", format!("driver: file, directory: \"{}\", {common}", directory.display()))], "");
            }
            Lock::Policy(server, lock) => {
                let (pg_backend, pg_driver) = postgres(lock);
                let rule = |rule: &Rule| {
                    let (members, on) =
                        if rule.fall_back { (format!("{PREFERRED}, {FALLBACK}"), "fallBack") } else { (PREFERRED.into(), "failClosed") };
                    format!("backends: [{members}], onUnavailable: {on}")
                };
                let rules: Vec<String> = POLICY_RULES
                    .iter()
                    .filter(|r| !r.prefix.is_empty())
                    .map(|r| format!("{{ prefix: '{}', {} }}", r.prefix, rule(r)))
                    .collect();
                let default = POLICY_RULES.iter().find(|r| r.prefix.is_empty()).map(rule).expect("a default rule");
                let policy = format!(
                    "driver: policy, waitTimeoutMs: {POLICY_WAIT_MS}, reprobeCooldownMs: {REPROBE_COOLDOWN_MS}, rules: [{}], default: {{ {default} }}",
                    rules.join(", ")
                );
                let leased = |backend: String| format!("{backend}, {common}, leaseMs: {lease_ms}");
                return worker::yaml(
                    &[("faults", policy), (PREFERRED, leased("driver: redis, connection: main".into())), (FALLBACK, leased(pg_backend))],
                    &format!("{}{pg_driver}", connection("redis", format!("url: \"{}\"", server.url()))),
                );
            }
        };
        worker::yaml(&[("faults", format!("{backend}, {common}, leaseMs: {lease_ms}"))], &driver)
    }

    /// How many of the workers' locks in `namespace` are held or waited for
    /// (Redis: lock keys; PostgreSQL: live holder and waiting rows; a
    /// policy's: its members').
    pub fn left_behind(&self, namespace: &str) -> usize {
        match self {
            Lock::Policy(server, lock) => lock.left_behind(namespace) + redis_locks(server.keys(), namespace),
            Lock::Postgres(lock) => lock.left_behind(namespace),
            // The private server holds the workers' rows only.
            Lock::Mysql(lock) => lock.left_behind(),
            // Every lock file nobody holds can be locked now.
            Lock::File(directory) => std::fs::read_dir(directory)
                .map(|entries| entries.filter_map(|entry| entry.ok()).filter(|entry| !lockable(&entry.path())).count())
                .unwrap_or(0),
            _ => redis_locks(self.keys(), namespace),
        }
    }

    /// Every Redis key of the lock servers (the current primaries).
    pub fn keys(&self) -> Vec<String> {
        match self {
            Lock::Server(server) => server.keys(),
            Lock::Sentinel(sentinels) => sentinels.primary().keys(),
            Lock::Cluster(cluster) => cluster.keys("*"),
            Lock::Policy(server, _) => server.keys(),
            Lock::Postgres(_) | Lock::File(_) | Lock::Mysql(_) => panic!("only a Redis lock has Redis keys"),
        }
    }

    /// Kills the primary (Sentinel), or the primary of `keys[0]`'s slot
    /// (Cluster), and waits until a replica took over, at most `bound`.
    pub fn fail_over(&mut self, namespace: &str, keys: &[String], bound: Duration) -> Failover {
        match self {
            Lock::Server(_) | Lock::Postgres(_) | Lock::File(_) | Lock::Policy(..) | Lock::Mysql(_) => {
                panic!("a single server has no replica to fail over to")
            }
            Lock::Sentinel(sentinels) => {
                let old = sentinels.kill_primary();
                let killed_at = mono_us();
                let started = Instant::now();
                sentinels.wait_new_primary(old, bound);
                Failover { killed_at, keys: keys.to_vec(), took_over: started.elapsed() }
            }
            Lock::Cluster(cluster) => {
                let primary = cluster.primary_of(&lock_key(namespace, &keys[0]));
                let affected = keys.iter().filter(|key| cluster.primary_of(&lock_key(namespace, key)) == primary).cloned().collect();
                cluster.kill(primary);
                let killed_at = mono_us();
                let started = Instant::now();
                cluster.wait_ok(bound);
                Failover { killed_at, keys: affected, took_over: started.elapsed() }
            }
        }
    }
}

pub use crate::names::lock_key;

/// The first section, by any worker, on a key of the failed-over primary
/// that was granted after the kill: how long after it, and by whom.
pub fn served_again(failover: &Failover, holds: &[Hold]) -> Option<(Duration, String)> {
    holds
        .iter()
        .filter(|h| h.start > failover.killed_at && failover.keys.contains(&h.key))
        .min_by_key(|h| h.start)
        .map(|h| (Duration::from_micros(h.start - failover.killed_at), h.worker.clone()))
}

/// [`served_again`] per kind of worker (`rust`, `c`, `node`: the prefix of
/// its name), for the report.
pub fn served_again_by_kind(failover: &Failover, holds: &[Hold]) -> String {
    ["rust", "c", "node"]
        .iter()
        .map(|kind| {
            let of_kind: Vec<Hold> = holds.iter().filter(|h| h.worker.split('-').next() == Some(kind)).cloned().collect();
            match served_again(failover, &of_kind) {
                Some((after, _)) => format!("{kind} {} ms", after.as_millis()),
                None => format!("{kind} never"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// True when `file` can be locked exclusively now (and it is let go at
/// once): no process holds a kernel lock on it.
fn lockable(file: &Path) -> bool {
    let Ok(opened) = std::fs::File::open(file) else { return true };
    // SAFETY: flock(2) on a descriptor `opened` keeps open.
    unsafe { libc::flock(opened.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}
