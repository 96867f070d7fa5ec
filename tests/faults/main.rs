//! The fault-injection suite (run it with `scripts/test-faults`; longer with
//! `FAULTS_SECONDS=60`, one scenario with `FAULTS_ONLY=<name>`, a few with
//! `FAULTS_ONLY=<name>,<name>`).
//!
//! Per scenario, worker processes (Rust: this binary run as `worker`; C:
//! `worker.c` against liblock; Node: `worker.mjs` on @dokebi/lock) contend for a few keys on a private lock
//! redis-server (or, in `sentinel-failover` and `cluster-failover`, a private
//! Sentinel deployment or Redis Cluster, see `topology.rs`; every worker gets
//! its connection as YAML, so the topology reaches the three kinds alike).
//! Each section does a fenced read-modify-write on a store
//! that lives on a second redis-server (see `store.rs`) and logs its hold
//! (see `log.rs`). Meanwhile the harness injects one kind of fault. Then it
//! checks (see `check.rs`): fences order every two sections that did not
//! overlap; the store accepted strictly growing fences and lost no
//! increment; sections never overlap unless a fault outlasted the lease, and
//! then the stale holder was told (`LEASE_LOST` / `OUTCOME_UNKNOWN`); every
//! worker exits by itself; no lock key is left; after a failover the killed
//! primary's keys are granted again within [`FAILOVER_BOUND`]. It prints one
//! table row per scenario (and the failover times) and fails on any
//! violation.
//!
//! The `pg-*` scenarios put the lock in the machine's PostgreSQL (`driver:
//! postgres`, a schema of the scenario's own; see `topology.rs`) under the
//! faults that do not need Redis, and end every worker session with
//! `pg_terminate_backend` (`pg-terminate`). The `file-*` ones use the file
//! driver (lock files in a directory of the scenario's own), where no fault
//! lets sections overlap: there is no lease, a paused holder keeps its lock.
//!
//! The `mysql-*` scenarios put the lock in a private MariaDB (`driver:
//! mysql`, see `topology.rs`): it crashes (SIGKILL) and restarts on its
//! data (`mysql-crash`), every worker connection is ended by `KILL`
//! (`mysql-kill`), or it fails over to a lagging replica, asynchronous
//! (`mysql-failover`) or semi-synchronous (`mysql-failover-semisync`).
//!
//! The `policy-*` scenario puts the lock behind a policy backend (`driver:
//! policy`, see `docs/policy.md`) over a private redis-server and the
//! machine's PostgreSQL (see [`topology::POLICY_RULES`]): `k0` fails closed
//! on Redis, the other keys fall back to PostgreSQL. The fault kills Redis
//! once under load and restarts it empty a while later. There the check
//! (see `check::check_policy`) also holds each rule to its promise: no
//! overlap at all on a fail-closed key, and a fallback only, with its
//! cross-backend overlaps, inside the outage's window; a fallback key is
//! refused only there, and only while its process was trying it on Redis
//! (`log::PLACED`, docs/policy.md).
//!
//! The `mixed-*` scenarios take the lock kinds of issue 21 under the faults
//! that outlast a lease: the workers' sections on `k0` and `k1` are readers
//! (shared) or writers (exclusive), and those on `k2` hold 1 or 2 units of a
//! counted key of limit [`MIXED_LIMIT`], each kind of worker through its own
//! surface's API. There the check also holds readers and counted sections
//! to their rules (see `check.rs`), and the store refuses a stale writer
//! below a reader's fence (see `store.rs`).

#[path = "../support/cluster.rs"]
mod cluster;
#[path = "../mysql/server.rs"]
mod mysql_server;
#[path = "../support/names.rs"]
mod names;
#[path = "../postgres/mod.rs"]
mod postgres;
#[path = "../postgres/server.rs"]
mod postgres_server;
#[path = "../support/redis_server.rs"]
mod redis_server;
#[path = "../support/sentinel.rs"]
mod sentinel;

mod check;
mod log;
mod proxy;
mod store;
mod topology;
mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use check::{check, check_policy, Findings, Policy};
use log::{mono_us, Hold, HoldKind};
use proxy::Proxy;
use redis_server::RedisServer;
use store::Attempt;
use topology::{Failover, Lock, MyLock, PgLock, WAIT_TIMEOUT_MS};
use worker::WorkerArgs;

const LEASE_MS: u32 = 1000;
const KEYS: u32 = 3;
const NAMESPACE: &str = "faults";
/// The limit of the counted key in the mixed scenarios: with weights of 1
/// and 2 and six workers, enough to overlap and to be full.
const MIXED_LIMIT: u32 = 3;

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// A holder SIGSTOPped for longer than the lease, then resumed.
    Stop,
    /// A holder killed with SIGKILL (and replaced by a fresh worker).
    Kill,
    /// The lock server killed while a worker holds a lease, and restarted
    /// empty at once (no persistence): long sections make the next holder
    /// overlap the old one, which only the fence can stop.
    Restart,
    /// Once, the lock server crashes while a worker holds a lease (PostgreSQL:
    /// `pg_ctl stop -m immediate`, no checkpoint; MariaDB: SIGKILL) and
    /// starts again at once, recovering from its WAL (redo log): grants
    /// were committed synchronously, so every one survives and sections
    /// never overlap.
    Crash,
    /// The lock server (PostgreSQL, MariaDB) has an asynchronous streaming
    /// standby (replica) fed through a proxy; once, the link stops
    /// forwarding (the standby lags), and a moment later, while a worker
    /// holds a lease, the primary crashes, the standby is promoted and the
    /// workers' proxy is pointed at it. The grants it had not received are
    /// lost: a next holder may overlap the holder of one, which only the
    /// fence can stop.
    Promote,
    /// [`Fault::Promote`] with a semi-synchronous replica (MariaDB,
    /// `rpl_semi_sync_master_enabled`, waiting before the commit): a grant
    /// is answered only once the replica received it, so the held link
    /// stalls every commit (acquires and renewals end `OUTCOME_UNKNOWN`),
    /// the replica has every grant its holder was told of, and sections
    /// never overlap.
    SyncPromote,
    /// `CLIENT KILL TYPE pubsub`: every subscription dropped.
    PubsubKill,
    /// `SCRIPT FLUSH`: the next `EVALSHA` answers NOSCRIPT.
    ScriptFlush,
    /// `DEBUG SLEEP 0.25`: the server stops answering for a while.
    DebugSleep,
    /// 20 ms added each way by a TCP proxy.
    Latency,
    /// The proxy holds every byte for 1.7 s for a moment: past
    /// `commandTimeoutMs` (800 ms) and the lease, so commands in flight end
    /// `OUTCOME_UNKNOWN` and connections are replaced.
    Stall,
    /// The lock server takes an RDB snapshot (`SAVE`) now and then; a moment
    /// later, while a worker holds a lease, it is killed (SIGKILL) and
    /// restarted from that snapshot: the locks and fence counters come back
    /// as they were a few grants ago. Long sections make the next holder
    /// overlap the old one; fences handed out after the snapshot must not
    /// be handed out again.
    SnapshotRestart,
    /// The lock server has a replica fed through a proxy (the replication
    /// link). The link stops forwarding for a while (the replica lags), then,
    /// while a worker holds a lease, the primary is killed, the replica is
    /// promoted (`REPLICAOF NO ONE`) and the workers' front proxy is pointed
    /// at it (their connections drop and reopen there). The new primary
    /// misses the latest locks, releases and fence counters. A fresh replica
    /// is attached for the next round.
    Failover,
    /// The lock is a Sentinel deployment (primary, one replica, 3
    /// sentinels); once, while a worker holds a lease, the primary is
    /// killed (SIGKILL). Acquires fail until the sentinels promote the
    /// replica; the workers follow it by themselves. Replication is
    /// asynchronous, so the last locks and releases may be lost with it.
    SentinelFailover,
    /// Every session of the workers ended by the server every 300 ms
    /// (PostgreSQL: `pg_terminate_backend`; MariaDB: `KILL`), as an
    /// administrator, a pooler or a failover does: statements in flight end `OUTCOME_UNKNOWN`, the
    /// listeners reconnect.
    Terminate,
    /// The lock is a Redis Cluster (3 primaries, 3 replicas); once, while a
    /// worker holds a lease, the primary of `k0`'s slot (and of any other
    /// key's there) is killed (SIGKILL). Its keys fail until its replica is
    /// elected; the other keys go on.
    ClusterFailover,
    /// The policy's Redis member killed (SIGKILL) once while a worker holds
    /// a lease, and restarted empty [`OUTAGE`] later: meanwhile fallback
    /// keys are served by PostgreSQL and fail-closed ones refused
    /// `NO_ELIGIBLE_BACKEND`, until each process tries Redis again.
    Outage,
}

/// How long the policy's Redis member stays down: past every section, so
/// that each process finds it unavailable, and short enough that a 3 s run
/// goes on well past the fallback's window.
const OUTAGE: Duration = Duration::from_millis(500);

struct Scenario {
    name: &'static str,
    fault: Fault,
    /// The longest nap inside a section (each takes a random part of it).
    hold_ms: u32,
    /// 0: every section exclusive. Else mixed kinds, the last key counted
    /// with this limit (see `worker.rs`).
    limit: u32,
    /// Where the workers' lock is.
    on: On,
}

/// The workers' driver.
#[derive(Clone, Copy, PartialEq)]
enum On {
    /// A redis-server, or the topology the fault needs.
    Redis,
    /// The machine's PostgreSQL.
    Postgres,
    /// Lock files in a directory of the scenario's own: no lease, so no
    /// fault here lets two sections overlap.
    File,
    /// A policy backend over a redis-server and the machine's PostgreSQL.
    Policy,
    /// A private MariaDB (and, for a failover, its replica).
    Mysql,
}

const SCENARIOS: &[Scenario] = &[
    Scenario { name: "baseline", fault: Fault::None, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "sigstop-holder", fault: Fault::Stop, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "sigkill-holder", fault: Fault::Kill, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "restart-redis", fault: Fault::Restart, hold_ms: 300, limit: 0, on: On::Redis },
    Scenario { name: "kill-pubsub", fault: Fault::PubsubKill, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "script-flush", fault: Fault::ScriptFlush, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "debug-sleep", fault: Fault::DebugSleep, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "latency-proxy", fault: Fault::Latency, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "stall-proxy", fault: Fault::Stall, hold_ms: 15, limit: 0, on: On::Redis },
    Scenario { name: "snapshot-restart", fault: Fault::SnapshotRestart, hold_ms: 300, limit: 0, on: On::Redis },
    Scenario { name: "replica-failover", fault: Fault::Failover, hold_ms: 300, limit: 0, on: On::Redis },
    Scenario { name: "sentinel-failover", fault: Fault::SentinelFailover, hold_ms: 300, limit: 0, on: On::Redis },
    Scenario { name: "cluster-failover", fault: Fault::ClusterFailover, hold_ms: 300, limit: 0, on: On::Redis },
    // Mixed kinds under the faults that make leases expire under their
    // holders: a holder paused (SIGSTOP) past its lease, the lock server
    // restarted empty under long sections (every lease gone at once, readers'
    // and counted ones with the writers'), and a proxy stall past the lease
    // and `commandTimeoutMs` (renewals and releases end OUTCOME_UNKNOWN).
    Scenario { name: "mixed-sigstop", fault: Fault::Stop, hold_ms: 15, limit: MIXED_LIMIT, on: On::Redis },
    Scenario { name: "mixed-restart", fault: Fault::Restart, hold_ms: 300, limit: MIXED_LIMIT, on: On::Redis },
    Scenario { name: "mixed-stall", fault: Fault::Stall, hold_ms: 15, limit: MIXED_LIMIT, on: On::Redis },
    // The postgres driver, from every surface, under the faults that do
    // not depend on Redis, and its sessions ended by the server.
    Scenario { name: "pg-baseline", fault: Fault::None, hold_ms: 15, limit: 0, on: On::Postgres },
    Scenario { name: "pg-sigstop-holder", fault: Fault::Stop, hold_ms: 15, limit: 0, on: On::Postgres },
    Scenario { name: "pg-sigkill-holder", fault: Fault::Kill, hold_ms: 15, limit: 0, on: On::Postgres },
    Scenario { name: "pg-stall-proxy", fault: Fault::Stall, hold_ms: 15, limit: 0, on: On::Postgres },
    Scenario { name: "pg-terminate", fault: Fault::Terminate, hold_ms: 15, limit: 0, on: On::Postgres },
    Scenario { name: "pg-crash", fault: Fault::Crash, hold_ms: 300, limit: 0, on: On::Postgres },
    Scenario { name: "pg-failover", fault: Fault::Promote, hold_ms: 300, limit: 0, on: On::Postgres },
    Scenario { name: "pg-mixed-sigstop", fault: Fault::Stop, hold_ms: 15, limit: MIXED_LIMIT, on: On::Postgres },
    // The file driver: a paused holder keeps its kernel lock (the others
    // wait), a killed one's is dropped by the kernel at once.
    Scenario { name: "file-baseline", fault: Fault::None, hold_ms: 15, limit: 0, on: On::File },
    Scenario { name: "file-sigstop-holder", fault: Fault::Stop, hold_ms: 15, limit: 0, on: On::File },
    Scenario { name: "file-sigkill-holder", fault: Fault::Kill, hold_ms: 15, limit: 0, on: On::File },
    Scenario { name: "file-mixed-sigstop", fault: Fault::Stop, hold_ms: 15, limit: MIXED_LIMIT, on: On::File },
    // The mysql driver, from every surface: a holder paused past its lease
    // or killed, a proxy stall past the lease and `commandTimeoutMs`, its
    // server crashed, its connections killed, a failover to a lagging
    // replica.
    Scenario { name: "mysql-sigstop-holder", fault: Fault::Stop, hold_ms: 15, limit: 0, on: On::Mysql },
    Scenario { name: "mysql-sigkill-holder", fault: Fault::Kill, hold_ms: 15, limit: 0, on: On::Mysql },
    Scenario { name: "mysql-stall-proxy", fault: Fault::Stall, hold_ms: 15, limit: 0, on: On::Mysql },
    Scenario { name: "mysql-crash", fault: Fault::Crash, hold_ms: 300, limit: 0, on: On::Mysql },
    Scenario { name: "mysql-kill", fault: Fault::Terminate, hold_ms: 15, limit: 0, on: On::Mysql },
    Scenario { name: "mysql-failover", fault: Fault::Promote, hold_ms: 300, limit: 0, on: On::Mysql },
    Scenario { name: "mysql-failover-semisync", fault: Fault::SyncPromote, hold_ms: 300, limit: 0, on: On::Mysql },
    // Redis, a policy's preferred member, gone for a while under load.
    Scenario { name: "policy-redis-down", fault: Fault::Outage, hold_ms: 15, limit: 0, on: On::Policy },
];

/// How long a scenario with a real failover runs at least: the kill comes
/// after [`FAILOVER_AFTER`], the keys must be served again within
/// [`FAILOVER_BOUND`], and the run goes on a while after that.
const FAILOVER_RUN: Duration = Duration::from_secs(10);
const FAILOVER_AFTER: Duration = Duration::from_millis(1000);
/// How soon after a primary's death the workers must be granted its keys
/// again: detection (`down-after-milliseconds` / `cluster-node-timeout`,
/// both 1 s), the promotion (about 1.5 s), and slack for a loaded machine.
const FAILOVER_BOUND: Duration = Duration::from_secs(7);

impl Fault {
    /// True when no fault outlasts a lease, so sections must never overlap.
    fn exclusive(self) -> bool {
        !matches!(
            self,
            Fault::Stop
                | Fault::Restart
                | Fault::SnapshotRestart
                | Fault::Failover
                | Fault::Promote
                | Fault::SentinelFailover
                | Fault::ClusterFailover
        )
    }

    /// True when a lock key may outlive its closed holder, until it expires:
    /// a killed holder's, or one granted by an acquire whose answer never
    /// came (its owner cleans up by token, but may close first), or one a
    /// snapshot or a lagging replica brought back after its holder released
    /// it: it carries the expiry it was set with (RDB and replication keep
    /// the absolute time), so it is gone within a lease of that grant too.
    fn leaves_expiring_keys(self) -> bool {
        matches!(
            self,
            Fault::Kill
                | Fault::Stall
                | Fault::Terminate
                | Fault::Crash
                | Fault::Promote
                | Fault::SyncPromote
                | Fault::SnapshotRestart
                | Fault::Failover
                | Fault::SentinelFailover
                | Fault::ClusterFailover
        )
    }

    /// How many times a run must inject this fault, at the least and at the
    /// most, to have tested what its scenario names: a scenario whose fault
    /// never happened (no holder showed up to pause, the server's answer
    /// said nothing was killed) must fail, not pass as if it had held.
    fn injections(self) -> (usize, usize) {
        match self {
            Fault::None => (0, 0),
            // Once by design: recovery or an election takes the rest of the run.
            Fault::Crash
            | Fault::Promote
            | Fault::SyncPromote
            | Fault::SentinelFailover
            | Fault::ClusterFailover
            | Fault::Latency
            | Fault::Outage => (1, 1),
            _ => (1, usize::MAX),
        }
    }

    /// True for the scenarios whose lock is a Sentinel deployment or a cluster.
    fn topology(self) -> bool {
        matches!(self, Fault::SentinelFailover | Fault::ClusterFailover)
    }

    /// True when the run lasts at least [`FAILOVER_RUN`]: a failover, and a
    /// server that crashes or is replaced once and must come back, leave
    /// the workers a second or more with no server (more on a loaded host:
    /// CI's run of 2026-12-05 at load 10 saw pg-crash's recovery take most
    /// of a 3 s run, 8 sections in all), and the run must go on long after.
    fn runs_long(self) -> bool {
        self.topology() || matches!(self, Fault::Crash | Fault::Promote | Fault::SyncPromote)
    }

    /// The codes an acquire may fail with under this fault: a server gone or
    /// stalled past `commandTimeoutMs` (`PROVIDER_FAILED`, `OUTCOME_UNKNOWN`),
    /// and, where keys stay locked or unreachable for seconds, a wait that
    /// ran out (`WAIT_TIMEOUT`). Where the fault leaves the server answering
    /// within `commandTimeoutMs` and every lease goes within one lease
    /// (`waitTimeoutMs` is 3 leases), an acquire never fails.
    fn acquire_failures(self) -> &'static [&'static str] {
        match self {
            Fault::None | Fault::Latency | Fault::PubsubKill | Fault::ScriptFlush | Fault::DebugSleep | Fault::Stop | Fault::Kill => &[],
            Fault::Restart | Fault::SnapshotRestart | Fault::Failover => &["PROVIDER_FAILED", "OUTCOME_UNKNOWN"],
            Fault::Stall
            | Fault::Terminate
            | Fault::Crash
            | Fault::Promote
            | Fault::SyncPromote
            | Fault::SentinelFailover
            | Fault::ClusterFailover => &["PROVIDER_FAILED", "OUTCOME_UNKNOWN", "WAIT_TIMEOUT"],
            // A fail-closed key while Redis cannot serve, a command in
            // flight when it died, and contention under the policy's short
            // wait (neither of which moves an acquire to another member).
            // PROVIDER_FAILED: an acquire whose wait ended while the
            // restarted Redis was still being connected to (a slow connect
            // is not an outage: the policy does not fall back on it).
            // PLACED: a key another acquire of its process was still
            // trying on Redis (check_policy holds these to the outage).
            Fault::Outage => &["NO_ELIGIBLE_BACKEND", log::PLACED, "OUTCOME_UNKNOWN", "PROVIDER_FAILED", "WAIT_TIMEOUT"],
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Rust,
    C,
    Node,
}

/// Every kind of worker a scenario runs, by the name its workers' names start with.
const KINDS: [&str; 3] = ["rust", "c", "node"];

struct Worker {
    name: String,
    kind: Kind,
    child: Child,
    log: PathBuf,
    killed_at: Option<u64>,
}

/// One scenario in progress.
struct Run {
    dir: PathBuf,
    lock: Lock,
    store: RedisServer,
    scripts: store::Scripts,
    /// The workers' way to the lock server, when they go through a proxy.
    proxy: Option<Proxy>,
    /// [`Fault::Failover`]: the lock server's replica and its replication link.
    replica: Option<(RedisServer, Proxy)>,
    c_worker: PathBuf,
    workers: Vec<Worker>,
    started: Instant,
    run: Duration,
    hold_ms: u32,
    limit: u32,
    /// Each fault injected, with what it was done to (`SIGSTOP rust-3`).
    faults: Vec<String>,
    violations: Vec<String>,
    /// The primary killed in a failover scenario.
    failover: Option<Failover>,
    /// A failover of the mysql driver's server: how many sections were open
    /// (grants their holders were told of) when the primary crashed, and
    /// those the promoted replica does not have (see [`lost_grants`]).
    lost_grants: Option<(usize, Vec<String>)>,
    /// [`Fault::Outage`]: when Redis was killed, and when it answered again.
    outage: Option<(u64, u64)>,
}

impl Run {
    fn lock_yaml(&self) -> String {
        self.lock.worker_yaml(self.proxy.as_ref().map(Proxy::port), NAMESPACE, LEASE_MS)
    }

    fn spawn(&mut self, kind: Kind) {
        let name = format!("{kind:?}-{}", self.workers.len()).to_lowercase();
        let log = self.dir.join(format!("{name}.log"));
        let args = WorkerArgs {
            store_port: self.store.port(),
            keys: KEYS,
            hold_ms: self.hold_ms,
            run_ms: self.run.saturating_sub(self.started.elapsed()).as_millis().max(1) as u32,
            log: log.display().to_string(),
            seed: mono_us() ^ (self.workers.len() as u64) << 48,
            read_sha: self.scripts.read.clone(),
            write_sha: self.scripts.write.clone(),
            shared_read_sha: self.scripts.shared_read.clone(),
            limit: self.limit,
        };
        let mut command = match kind {
            Kind::Rust => {
                let mut command = Command::new(std::env::current_exe().unwrap());
                command.arg("worker");
                command
            }
            Kind::C => Command::new(&self.c_worker),
            Kind::Node => {
                let mut command = Command::new("node");
                command.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/faults/worker.mjs"));
                command
            }
        };
        command.env(worker::YAML_VAR, self.lock_yaml());
        let stderr = std::fs::File::create(self.dir.join(format!("{name}.stderr"))).unwrap();
        let child =
            command.args(args.to_args()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr).spawn().expect("a worker starts");
        self.workers.push(Worker { name, kind, child, log, killed_at: None });
    }

    /// A live worker inside its section right now, if one shows up soon.
    fn find_holder(&self) -> Option<usize> {
        self.find_holder_of(|_, _| true)
    }

    /// A live worker inside a section of a key and kind `wanted` takes, if
    /// one shows up soon.
    fn find_holder_of(&self, wanted: impl Fn(&str, HoldKind) -> bool) -> Option<usize> {
        let until = Instant::now() + Duration::from_millis(500);
        while Instant::now() < until {
            let found = self.workers.iter().position(|w| {
                w.killed_at.is_none()
                    && log::holding(&std::fs::read_to_string(&w.log).unwrap_or_default()).is_some_and(|(key, kind)| wanted(key, kind))
            });
            if found.is_some() {
                return found;
            }
            sleep(Duration::from_millis(2));
        }
        None
    }

    /// The holder to pause: in a mixed run, of each kind in turn (a reader,
    /// a counted holder, a writer), so that a short run too pauses a reader
    /// under a writer and a counted holder under newer units; else (or when
    /// none of that kind shows up) any.
    fn find_holder_to_pause(&self) -> Option<usize> {
        if self.limit == 0 {
            return self.find_holder();
        }
        let turn = self.faults.len() % 3;
        let wanted = move |_: &str, kind: HoldKind| match kind {
            HoldKind::Reader => turn == 0,
            HoldKind::Counted { .. } => turn == 1,
            HoldKind::Writer => turn == 2,
        };
        self.find_holder_of(wanted).or_else(|| self.find_holder())
    }

    fn signal(&self, worker: usize, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a child we have not reaped yet.
        assert_eq!(unsafe { libc::kill(self.workers[worker].child.id() as libc::pid_t, signal) }, 0);
    }

    fn lock_command(&self, command: &redis::Cmd) {
        let _: redis::Value = command.query(&mut self.lock.server().client()).expect("the lock server takes the fault command");
    }

    /// [`Fault::Failover`]: attaches a fresh replica to the lock server
    /// through a replication link, and waits until it is in sync.
    fn attach_replica(&mut self) {
        let link = Proxy::start(self.lock.server().port(), Duration::ZERO);
        // A data dir of its own: a replica writes the primary's snapshot to disk.
        let replica = RedisServer::start_persistent(&["--replicaof", "127.0.0.1", &link.port().to_string()]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !replica.replica_synced() {
            assert!(Instant::now() < deadline, "the replica did not sync with the lock server");
            sleep(Duration::from_millis(5));
        }
        self.replica = Some((replica, link));
    }

    /// Injects the scenario's fault until the run is nearly over.
    fn inject(&mut self, fault: Fault) {
        let lease = Duration::from_millis(LEASE_MS.into());
        let mut killed_keys = BTreeMap::<String, Instant>::new();
        while self.started.elapsed() + Duration::from_millis(400) < self.run {
            match fault {
                Fault::None | Fault::Latency => sleep(Duration::from_millis(100)),
                Fault::Stop => {
                    sleep(Duration::from_millis(200));
                    if let Some(worker) = self.find_holder_to_pause() {
                        self.signal(worker, libc::SIGSTOP);
                        sleep(lease + Duration::from_millis(300));
                        self.signal(worker, libc::SIGCONT);
                        self.faults.push(format!("SIGSTOP {} in its section", self.workers[worker].name));
                    }
                }
                Fault::Kill => {
                    sleep(Duration::from_millis(300));
                    // A killed holder keeps its key for its whole lease (but
                    // on file), so kills of one key in a row add up: three
                    // (CI, 2026-12-07) kept a waiter queued for its whole
                    // `waitTimeoutMs`. One kill per key per wait keeps every
                    // wait within the one lease the scenario promises.
                    let now = Instant::now();
                    let fresh =
                        |key: &str| killed_keys.get(key).is_none_or(|at| now.duration_since(*at) > Duration::from_millis(WAIT_TIMEOUT_MS));
                    if let Some(worker) = self.find_holder_of(|key, _| fresh(key)) {
                        let log = std::fs::read_to_string(&self.workers[worker].log).unwrap_or_default();
                        if let Some((key, _)) = log::holding(&log) {
                            killed_keys.insert(key.to_owned(), now);
                        }
                        // The holder's section ends when the signal is sent:
                        // it runs nothing after, and its locks go when it
                        // dies (the file driver's at once, by the kernel). A
                        // time read after kill() may come after a next
                        // holder's grant on a loaded host (seen: 5 ms).
                        let killed_at = mono_us();
                        self.signal(worker, libc::SIGKILL);
                        let worker = &mut self.workers[worker];
                        worker.killed_at = Some(killed_at);
                        let _ = worker.child.wait();
                        let (kind, name) = (worker.kind, worker.name.clone());
                        self.spawn(kind);
                        self.faults.push(format!("SIGKILL {name} in its section"));
                    }
                }
                Fault::Restart => {
                    sleep(Duration::from_millis(400));
                    if let Some(worker) = self.find_holder() {
                        self.lock.server_mut().stop();
                        self.lock.server_mut().restart();
                        self.faults.push(format!("the lock server restarted empty under {}", self.workers[worker].name));
                    }
                }
                Fault::PubsubKill => {
                    sleep(Duration::from_millis(250));
                    let killed: i64 = redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("TYPE")
                        .arg("pubsub")
                        .query(&mut self.lock.server().client())
                        .expect("the lock server takes CLIENT KILL");
                    // A kill that found no subscription tested nothing.
                    if killed > 0 {
                        self.faults.push(format!("CLIENT KILL TYPE pubsub: {killed} subscriptions"));
                    }
                }
                Fault::ScriptFlush => {
                    sleep(Duration::from_millis(200));
                    self.lock_command(redis::cmd("SCRIPT").arg("FLUSH"));
                    self.faults.push("SCRIPT FLUSH on the lock server".into());
                }
                Fault::Stall => {
                    sleep(Duration::from_millis(700));
                    let proxy = self.proxy.as_ref().expect("a proxy");
                    proxy.set_latency(Duration::from_millis(1700));
                    sleep(Duration::from_millis(150));
                    proxy.set_latency(Duration::ZERO);
                    sleep(Duration::from_millis(1700));
                    self.faults.push("every worker's connection stalled 1.7 s".into());
                }
                Fault::SnapshotRestart => {
                    sleep(Duration::from_millis(150));
                    self.lock_command(&redis::cmd("SAVE"));
                    // Grants after the snapshot: the restart brings the
                    // counters back older than the fences they handed out.
                    sleep(Duration::from_millis(250));
                    if let Some(worker) = self.find_holder() {
                        self.lock.server_mut().stop();
                        self.lock.server_mut().restart();
                        self.faults.push(format!("the lock server restarted from a snapshot under {}", self.workers[worker].name));
                    }
                }
                Fault::Failover => {
                    self.attach_replica();
                    sleep(Duration::from_millis(200));
                    // The link stops forwarding: the replica lags behind.
                    self.replica.as_ref().unwrap().1.hold();
                    sleep(Duration::from_millis(300));
                    if let Some(worker) = self.find_holder() {
                        let (replica, _link) = self.replica.take().unwrap();
                        self.lock.server_mut().stop();
                        replica.replicate_from(None);
                        self.proxy.as_ref().expect("a front proxy").retarget(replica.port());
                        // The old primary (killed) goes, with its data dir.
                        self.lock = Lock::Server(replica);
                        self.faults.push(format!("the primary killed, its lagging replica promoted under {}", self.workers[worker].name));
                    } else {
                        self.replica = None;
                    }
                }
                Fault::SentinelFailover | Fault::ClusterFailover if self.failover.is_none() => {
                    sleep(FAILOVER_AFTER.saturating_sub(self.started.elapsed()));
                    if let Some(worker) = self.find_holder() {
                        let keys: Vec<String> = (0..KEYS).map(|k| format!("k{k}")).collect();
                        self.failover = Some(self.lock.fail_over(NAMESPACE, &keys, FAILOVER_BOUND));
                        self.faults.push(format!("a primary killed (SIGKILL) under {}", self.workers[worker].name));
                    }
                }
                Fault::SentinelFailover | Fault::ClusterFailover => sleep(Duration::from_millis(100)),
                // Once, the run's first second: the rest is the fallback's
                // and the return to Redis after the cooldown.
                Fault::Outage if self.faults.is_empty() => {
                    sleep(Duration::from_millis(600));
                    if let Some(worker) = self.find_holder() {
                        let down = mono_us();
                        self.lock.server_mut().stop();
                        sleep(OUTAGE);
                        self.lock.server_mut().restart();
                        self.outage = Some((down, mono_us()));
                        self.faults.push(format!(
                            "Redis killed under {}, restarted empty {} ms later",
                            self.workers[worker].name,
                            OUTAGE.as_millis()
                        ));
                    }
                }
                // Once: recovery takes a second or more on a loaded host,
                // and the rest of the run is the workers' after it.
                Fault::Crash if self.faults.is_empty() => {
                    sleep(Duration::from_millis(700));
                    if let Some(worker) = self.find_holder().filter(|_| self.lock.crash_and_recover()) {
                        self.faults.push(format!("the lock server crashed and recovered under {}", self.workers[worker].name));
                    }
                }
                Fault::Crash | Fault::Outage => sleep(Duration::from_millis(100)),
                Fault::Promote | Fault::SyncPromote => {
                    sleep(Duration::from_millis(400));
                    // Asynchronous: the standby stops receiving, and the
                    // grants of the next moment are the primary's alone.
                    // Semi-synchronous: no grant is answered once the link
                    // holds (each waits for the replica), so the holder is
                    // found first; 300 ms later, as in the asynchronous
                    // case, commits are in the primary's log, answered to
                    // nobody.
                    let semisync = fault == Fault::SyncPromote;
                    if !semisync {
                        self.lock.hold_replica();
                        sleep(Duration::from_millis(300));
                    }
                    if let Some(worker) = self.find_holder() {
                        if semisync {
                            self.lock.hold_replica();
                            sleep(Duration::from_millis(300));
                        }
                        let told = self.open_sections();
                        if let Some(port) = self.lock.promote_replica() {
                            self.lost_grants = self.lock.fences().map(|fences| (told.len(), lost_grants(&told, &fences)));
                            self.proxy.as_ref().expect("a front proxy").retarget(port);
                            self.faults
                                .push(format!("the primary crashed, its lagging standby promoted under {}", self.workers[worker].name));
                        }
                    }
                }
                Fault::Terminate => {
                    sleep(Duration::from_millis(300));
                    // A round that ended no session tested nothing.
                    self.faults.extend(self.lock.end_sessions());
                }
                Fault::DebugSleep => {
                    sleep(Duration::from_millis(700));
                    self.lock_command(redis::cmd("DEBUG").arg("SLEEP").arg("0.25"));
                    self.faults.push("DEBUG SLEEP 0.25 on the lock server".into());
                }
            }
        }
    }

    /// The open section of each live worker now (granted, not yet released:
    /// a grant its holder was told of).
    fn open_sections(&self) -> Vec<Hold> {
        let live = self.workers.iter().filter(|w| w.killed_at.is_none());
        live.filter_map(|w| log::parse(&w.name, &std::fs::read_to_string(&w.log).unwrap_or_default()).open).collect()
    }

    /// Waits for every worker to exit by itself (killing stragglers).
    fn wait_workers(&mut self) {
        let deadline = self.started + self.run + Duration::from_millis(LEASE_MS.into()) + Duration::from_secs(10);
        for worker in &mut self.workers {
            if worker.killed_at.is_some() {
                continue;
            }
            let status = loop {
                if let Some(status) = worker.child.try_wait().unwrap() {
                    break Some(status);
                }
                if Instant::now() > deadline {
                    let _ = worker.child.kill();
                    let _ = worker.child.wait();
                    break None;
                }
                sleep(Duration::from_millis(20));
            };
            match status {
                Some(status) if status.success() => {}
                Some(status) => {
                    let stderr = std::fs::read_to_string(self.dir.join(format!("{}.stderr", worker.name))).unwrap_or_default();
                    self.violations.push(format!("worker {} exited with {status}: {}", worker.name, stderr.trim()));
                }
                None => self.violations.push(format!("worker {} did not exit by itself", worker.name)),
            }
        }
    }

    /// No lock key may stay once everyone closed, but for those that only
    /// expire (see [`Fault::leaves_expiring_keys`]), which get a lease to go.
    fn check_lock_keys(&mut self, fault: Fault) {
        let grace = if fault.leaves_expiring_keys() { Duration::from_millis(u64::from(LEASE_MS) + 500) } else { Duration::ZERO };
        let until = Instant::now() + grace;
        loop {
            let left = self.lock.left_behind(NAMESPACE);
            if left == 0 {
                return;
            }
            if Instant::now() >= until {
                self.violations.push(format!("{left} locks left held or waited for after every worker closed"));
                return;
            }
            sleep(Duration::from_millis(50));
        }
    }

    /// Every hold of every worker, and the failed acquires by kind of
    /// worker and code, and each failed acquire (key, code, time).
    fn holds(&mut self) -> (Vec<Hold>, Failures, Vec<(String, String, u64)>) {
        let mut holds = Vec::new();
        let mut failures = Failures::new();
        let mut failed = Vec::new();
        for worker in &self.workers {
            let text = std::fs::read_to_string(&worker.log).unwrap_or_default();
            let log = log::parse(&worker.name, &text);
            holds.extend(log.holds);
            for (code, count) in log.failures {
                *failures.entry((kind_of(&worker.name).to_string(), code)).or_default() += count;
            }
            failed.extend(log.failed);
            for moved in log.moved {
                self.violations.push(format!("worker {}: a lease moved: {moved}", worker.name));
            }
            match (log.open, worker.killed_at) {
                (Some(mut open), Some(killed_at)) => {
                    // Killed in its section, or after it while releasing.
                    open.end = open.end.min(killed_at);
                    holds.push(open);
                }
                (Some(_), None) => self.violations.push(format!("worker {} left a section open", worker.name)),
                (None, _) => {}
            }
        }
        (holds, failures, failed)
    }
}

/// Failed acquires by kind of worker (`rust`, `c`, `node`) and code.
type Failures = BTreeMap<(String, String), u64>;

/// The kind of worker (one of [`KINDS`]) that `worker` names.
fn kind_of(worker: &str) -> &str {
    worker.split('-').next().unwrap()
}

/// What a scenario must show besides the checks of `check.rs`, so that it
/// tests what it is for: every kind of worker completed sections (a surface
/// whose every acquire failed would otherwise pass: its workers log the
/// failures and exit 0), and every failed acquire has a code that `fault`
/// explains (see [`Fault::acquire_failures`]).
fn progress_violations(fault: Fault, holds: &[Hold], failures: &Failures) -> Vec<String> {
    let mut violations = Vec::new();
    for kind in KINDS {
        let sections = holds.iter().filter(|h| kind_of(&h.worker) == kind).count();
        let failed: u64 = failures.iter().filter(|((k, _), _)| k == kind).map(|(_, n)| n).sum();
        if sections == 0 {
            violations.push(format!("no {kind} worker completed a section ({failed} acquires failed)"));
        }
    }
    let allowed = fault.acquire_failures();
    for ((kind, code), count) in failures {
        if !allowed.contains(&code.as_str()) {
            violations.push(format!(
                "{count} acquires of {kind} workers failed with {code}, which this fault does not explain (expected only {allowed:?})"
            ));
        }
    }
    violations
}

/// The grants of `told` (sections open when a primary crashed) that a
/// promoted replica lost: their key's last fence there (`fences`) is below
/// theirs. A fence never goes back on one server, so a grant it had keeps
/// the key's fence at or above its own.
fn lost_grants(told: &[Hold], fences: &BTreeMap<String, u128>) -> Vec<String> {
    told.iter()
        .filter(|hold| fences.get(&hold.key).is_none_or(|fence| *fence < hold.fence))
        .map(|hold| format!("{}'s grant of {} (fence {})", hold.worker, hold.key, hold.fence))
        .collect()
}

/// A violation when `injected` (one line a fault, with its target) is
/// fewer or more faults than `fault` stands for.
fn injection_violation(fault: Fault, injected: &[String]) -> Option<String> {
    let (fewest, most) = fault.injections();
    let count = injected.len();
    (count < fewest || count > most).then(|| {
        let bound = if most == usize::MAX { format!("at least {fewest}") } else { format!("{fewest} to {most}") };
        format!("{count} faults injected, where the scenario stands for {bound}: {injected:?}")
    })
}

/// `FAULTS_ONLY`'s scenarios (all when it is unset), or why it names none:
/// a misspelt name must fail the run, not run nothing and pass.
fn selected(only: Option<&str>) -> Result<Vec<&'static Scenario>, String> {
    let Some(only) = only else { return Ok(SCENARIOS.iter().collect()) };
    let names: Vec<&str> = only.split(',').map(str::trim).filter(|name| !name.is_empty()).collect();
    let unknown: Vec<&str> = names.iter().copied().filter(|name| !SCENARIOS.iter().any(|s| s.name == *name)).collect();
    if names.is_empty() || !unknown.is_empty() {
        let known: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        return Err(format!("FAULTS_ONLY={only:?} names no scenario {unknown:?}; the scenarios are: {}", known.join(", ")));
    }
    Ok(SCENARIOS.iter().filter(|s| names.contains(&s.name)).collect())
}

struct Row {
    name: &'static str,
    limit: u32,
    workers: usize,
    findings: Findings,
    /// Each fault injected, with its target.
    faults: Vec<String>,
    failures: Failures,
    /// A failover scenario's figures: how long until a replica took over
    /// (as the harness saw it), and until a worker was granted a key of the
    /// killed primary again (and which worker).
    failover: Option<(Duration, Option<(Duration, String)>)>,
    /// The same per kind of worker.
    failover_by_kind: String,
    /// A mysql failover's open sections at the crash, and those lost.
    lost_grants: Option<(usize, Vec<String>)>,
}

fn run_scenario(scenario: &Scenario, run: Duration, c_worker: &Path, root: &Path) -> Row {
    let dir = root.join(scenario.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let run = if scenario.fault.runs_long() { run.max(FAILOVER_RUN) } else { run };
    let lock = match scenario.fault {
        Fault::Promote if scenario.on == On::Mysql => Lock::Mysql(MyLock::with_replica(false)),
        Fault::SyncPromote => Lock::Mysql(MyLock::with_replica(true)),
        _ if scenario.on == On::Mysql => Lock::Mysql(MyLock::private()),
        Fault::Crash => Lock::Postgres(PgLock::private(scenario.name)),
        Fault::Promote => Lock::Postgres(PgLock::with_standby(scenario.name)),
        _ if scenario.on == On::Postgres => Lock::Postgres(PgLock::new(scenario.name)),
        _ if scenario.on == On::File => Lock::File(dir.join("locks")),
        _ if scenario.on == On::Policy => Lock::Policy(RedisServer::start(), PgLock::new(scenario.name)),
        Fault::SentinelFailover => Lock::Sentinel(sentinel::Sentinels::start()),
        Fault::ClusterFailover => Lock::Cluster(cluster::Cluster::start()),
        // Its snapshots go to a data dir of its own, which a restart loads.
        Fault::SnapshotRestart => Lock::Server(RedisServer::start_persistent(&[])),
        // No delay before a replica's sync starts (5 s by default).
        Fault::Failover => Lock::Server(RedisServer::start_persistent(&[])),
        _ => Lock::Server(RedisServer::start_with(&["--enable-debug-command", "local"])),
    };
    let store = RedisServer::start();
    let scripts = store::load(&mut store.client());
    let proxy = match scenario.fault {
        Fault::Latency => Some(Proxy::start(lock.port(), Duration::from_millis(20))),
        Fault::Stall | Fault::Failover | Fault::Promote | Fault::SyncPromote => Some(Proxy::start(lock.port(), Duration::ZERO)),
        _ => None,
    };
    let mut run = Run {
        dir,
        lock,
        store,
        scripts,
        proxy,
        replica: None,
        c_worker: c_worker.to_owned(),
        workers: Vec::new(),
        started: Instant::now(),
        run,
        hold_ms: scenario.hold_ms,
        limit: scenario.limit,
        faults: Vec::new(),
        violations: Vec::new(),
        failover: None,
        lost_grants: None,
        outage: None,
    };
    for kind in [Kind::Rust, Kind::C, Kind::Node, Kind::Rust, Kind::C, Kind::Node] {
        run.spawn(kind);
    }
    run.inject(scenario.fault);
    if scenario.fault == Fault::Latency {
        run.faults.push("20 ms each way on every worker's connection".into());
    }
    run.wait_workers();
    run.check_lock_keys(scenario.fault);
    let (holds, failures, failed) = run.holds();
    let mut client = run.store.client();
    let stores = (0..KEYS).map(|k| (format!("k{k}"), store::history(&mut client, &format!("k{k}")))).collect();
    let exclusive = scenario.fault.exclusive() || scenario.on == On::File;
    let lease_us = u64::from(LEASE_MS) * 1000;
    let mut findings = if scenario.on == On::Policy {
        // A fallback may serve from the kill until every process tried
        // Redis again: a killed server refuses connections at once, so a
        // process's last failing try ends by the time Redis is back, its
        // cooldown runs from there, and a section the fallback granted just
        // before lasts a while (half a second of slack for a loaded host:
        // seen, the last fallback 240 ms after the return).
        let after_back = (topology::REPROBE_COOLDOWN_MS + 500) * 1000;
        let policy = Policy { rules: topology::POLICY_RULES, preferred: topology::PREFERRED, outage: run.outage, after_back };
        check_policy(&holds, &failed, &stores, lease_us, &policy)
    } else {
        check(&holds, &stores, exclusive, lease_us)
    };
    if findings.holds < 10 {
        findings.violations.push(format!("only {} sections completed: the workers made no progress", findings.holds));
    }
    let failover = run.failover.as_ref().map(|failover| (failover.took_over, topology::served_again(failover, &holds)));
    let failover_by_kind = run.failover.as_ref().map(|failover| topology::served_again_by_kind(failover, &holds)).unwrap_or_default();
    if scenario.fault.topology() {
        match &failover {
            None => findings.violations.push("no primary was killed (no holder showed up)".into()),
            Some((_, None)) => findings.violations.push("no worker was granted a key of the killed primary again".into()),
            Some((_, Some((after, worker)))) if *after > FAILOVER_BOUND => findings.violations.push(format!(
                "the killed primary's keys were granted again only after {after:?} (worker {worker}), past {FAILOVER_BOUND:?}"
            )),
            Some(_) => {}
        }
    }
    if scenario.limit > 0 {
        // A mixed run that took no reader, writer or counted section, or
        // whose readers never met, did not test what it is for.
        let writers = findings.holds - findings.readers - findings.counted;
        for (what, count) in [
            ("writer", writers),
            ("reader", findings.readers),
            ("counted", findings.counted),
            ("overlapping reader", findings.shared_overlaps),
        ] {
            if count == 0 {
                findings.violations.push(format!("no {what} sections: the mix did not happen"));
            }
        }
    }
    // Semi-synchronous replication loses no grant its holder was told of
    // (docs/mysql.md, Durability); asynchronous replication may, and the
    // row below says how many it lost.
    if let (Fault::SyncPromote, Some((_, lost))) = (scenario.fault, &run.lost_grants) {
        if !lost.is_empty() {
            findings.violations.push(format!("grants told to their holders lost in the failover: {}", lost.join(", ")));
        }
    }
    findings.violations.extend(progress_violations(scenario.fault, &holds, &failures));
    findings.violations.extend(injection_violation(scenario.fault, &run.faults));
    findings.violations.append(&mut run.violations);
    Row {
        name: scenario.name,
        limit: scenario.limit,
        workers: run.workers.len(),
        findings,
        faults: run.faults,
        failures,
        failover,
        failover_by_kind,
        lost_grants: run.lost_grants.take(),
    }
}

/// The checks must be able to fail: feed them broken histories first.
fn self_test() {
    let of_kind = |kind: HoldKind, worker: &str, fence: u128, start: u64, end: u64, release: &str| Hold {
        worker: worker.into(),
        key: "k0".into(),
        fence,
        start,
        end,
        store: match kind {
            HoldKind::Writer => 'W',
            HoldKind::Reader => 'S',
            HoldKind::Counted { .. } => '-',
        },
        release: release.into(),
        kind,
        asked: start,
        member: "-".into(),
    };
    let hold =
        |worker: &str, fence: u128, start: u64, end: u64, release: &str| of_kind(HoldKind::Writer, worker, fence, start, end, release);
    let reader =
        |worker: &str, fence: u128, start: u64, end: u64, release: &str| of_kind(HoldKind::Reader, worker, fence, start, end, release);
    let units = |weight: u32, worker: &str, fence: u128, start: u64, end: u64, release: &str| {
        of_kind(HoldKind::Counted { limit: 3, weight }, worker, fence, start, end, release)
    };
    let none = BTreeMap::new();
    let overlap = [hold("a", 1, 0, 10, "OK"), hold("b", 2, 5, 15, "OK")];
    assert!(!check(&overlap, &none, true, 1000).violations.is_empty(), "an overlap in an exclusive scenario");
    assert!(!check(&overlap, &none, false, 1000).violations.is_empty(), "a stale holder not told");
    let told = [hold("a", 1, 0, 10, "LEASE_LOST"), hold("b", 2, 5, 15, "OK")];
    assert!(check(&told, &none, false, 1000).violations.is_empty(), "a told stale holder is fine");
    assert!(!check(&told, &none, true, 1000).violations.is_empty(), "but not where no fault outlasts the lease");
    let paused = [hold("a", 1, 0, 1500, "LEASE_LOST"), hold("b", 2, 1200, 1300, "OK")];
    assert!(check(&paused, &none, true, 1000).violations.is_empty(), "a holder the machine paused past the lease, told");
    let backwards = [hold("a", 2, 0, 10, "OK"), hold("b", 1, 10, 15, "OK")];
    assert!(!check(&backwards, &none, true, 1000).violations.is_empty(), "fences going backwards");
    let history =
        |value: u64, attempts: Vec<Attempt>| BTreeMap::from([("k0".to_string(), store::KeyHistory { value, refused: 0, attempts })]);
    let lost = history(1, vec![Attempt::Accepted(1), Attempt::Accepted(2)]);
    assert!(!check(&[], &lost, true, 1000).violations.is_empty(), "a lost increment");
    let repeated = history(2, vec![Attempt::Accepted(2), Attempt::Accepted(2)]);
    assert!(!check(&[], &repeated, true, 1000).violations.is_empty(), "a repeated fence");

    // Readers and writers.
    let readers = [reader("a", 1, 0, 10, "OK"), reader("b", 2, 5, 15, "OK"), reader("c", 3, 6, 8, "OK"), hold("d", 4, 15, 20, "OK")];
    let findings = check(&readers, &none, true, 1000);
    assert!(findings.violations.is_empty(), "overlapping readers, then a writer: {:?}", findings.violations);
    assert_eq!((findings.shared_overlaps, findings.overlaps), (3, 0), "three reader pairs overlapped, which is no conflict");
    let over_reader = [reader("a", 1, 0, 10, "OK"), hold("b", 2, 5, 15, "OK")];
    assert!(!check(&over_reader, &none, true, 1000).violations.is_empty(), "a writer overlapping a reader");
    assert!(!check(&over_reader, &none, false, 1000).violations.is_empty(), "a stale reader not told");
    let under_reader = [hold("a", 1, 0, 10, "OK"), reader("b", 2, 5, 15, "OK")];
    assert!(!check(&under_reader, &none, true, 1000).violations.is_empty(), "a reader overlapping a writer");
    let told_reader = [reader("a", 1, 0, 10, "LEASE_LOST"), reader("c", 3, 2, 9, "OK"), hold("b", 4, 5, 15, "OK")];
    assert!(!check(&told_reader, &none, false, 1000).violations.is_empty(), "a writer overlapping two readers, one not told");
    let told_readers = [reader("a", 1, 0, 10, "LEASE_LOST"), reader("c", 3, 2, 9, "OUTCOME_UNKNOWN"), hold("b", 4, 5, 15, "OK")];
    assert!(check(&told_readers, &none, false, 1000).violations.is_empty(), "a writer overlapping stale readers, told");
    let early_writer = [reader("a", 5, 0, 10, "OK"), hold("b", 4, 10, 15, "OK")];
    assert!(!check(&early_writer, &none, true, 1000).violations.is_empty(), "a writer's fence below an earlier reader's");
    // A reader granted first may log its section after a later one's (both held at once).
    let mut late_log = [reader("a", 2, 3, 10, "OK"), reader("b", 1, 12, 15, "OK")];
    late_log[1].asked = 1;
    assert!(check(&late_log, &none, true, 1000).violations.is_empty(), "readers granted together, logged apart");
    late_log[1].asked = 5;
    assert!(!check(&late_log, &none, true, 1000).violations.is_empty(), "a reader that asked after another's grant, below its fence");

    // Counted units: limit 3.
    let full =
        [units(2, "a", 1, 0, 10, "OK"), units(1, "b", 2, 2, 12, "OK"), units(1, "c", 3, 10, 20, "OK"), units(2, "d", 4, 12, 20, "OK")];
    let findings = check(&full, &none, true, 1000);
    assert!(findings.violations.is_empty(), "at most 3 units at once: {:?}", findings.violations);
    assert_eq!(findings.max_units, Some((3, 3, 3)));
    let mut granted_late = full.clone();
    granted_late[2].fence = 0;
    assert!(!check(&granted_late, &none, true, 1000).violations.is_empty(), "a counted holder that asked later, below an earlier fence");
    let exceeded = [units(2, "a", 1, 0, 10, "OK"), units(1, "b", 2, 2, 12, "OK"), units(1, "c", 3, 5, 20, "OK")];
    assert!(!check(&exceeded, &none, true, 1000).violations.is_empty(), "4 units of 3");
    assert!(!check(&exceeded, &none, false, 1000).violations.is_empty(), "4 units of 3, nobody told");
    // The paused holder is the middle fence, not the oldest: told, it is excused.
    let told_units = [units(1, "a", 1, 0, 1500, "OK"), units(2, "b", 2, 2, 1400, "LEASE_LOST"), units(2, "c", 3, 1100, 1200, "OK")];
    let findings = check(&told_units, &none, false, 1000);
    assert!(findings.violations.is_empty(), "a stale counted holder, told: {:?}", findings.violations);
    assert_eq!((findings.over_limit, findings.stale, findings.told), (1, 1, 1));
    assert!(check(&told_units, &none, true, 1000).violations.is_empty(), "which a pause past the lease excuses");
    let short_told = [units(2, "a", 1, 0, 10, "LEASE_LOST"), units(2, "b", 2, 2, 12, "OK")];
    assert!(
        !check(&short_told, &none, true, 1000).violations.is_empty(),
        "but a told holder not paused, only where a fault outlasts the lease"
    );
    let mixed_limits = [units(1, "a", 1, 0, 10, "OK"), hold("b", 2, 20, 30, "OK")];
    assert!(!check(&mixed_limits, &none, true, 1000).violations.is_empty(), "a key held with two limits");

    // The store: a writer below a reader's read, a reader below a write.
    let late_writer = history(1, vec![Attempt::Read(5), Attempt::Accepted(4)]);
    assert!(!check(&[], &late_writer, true, 1000).violations.is_empty(), "a write accepted below a reader's fence");
    let late_reader = history(1, vec![Attempt::Accepted(5), Attempt::Read(4)]);
    assert!(!check(&[], &late_reader, true, 1000).violations.is_empty(), "a read accepted below a writer's fence");
    let fine = history(2, vec![Attempt::Accepted(1), Attempt::Read(3), Attempt::Read(2), Attempt::Refused(2), Attempt::Accepted(4)]);
    assert!(check(&[], &fine, true, 1000).violations.is_empty(), "readers in any order between writes");

    // Every kind of worker made progress, and its failures are explained.
    let every_kind = [hold("rust-0", 1, 0, 10, "OK"), hold("c-1", 2, 10, 20, "OK"), hold("node-2", 3, 20, 30, "OK")];
    let failed = |kind: &str, code: &str| Failures::from([((kind.to_string(), code.to_string()), 5)]);
    assert!(progress_violations(Fault::None, &every_kind, &Failures::new()).is_empty(), "every kind completed sections");
    assert_eq!(
        progress_violations(Fault::None, &every_kind[..2], &failed("node", "PROVIDER_FAILED")).len(),
        2,
        "a kind whose every acquire failed"
    );
    assert!(!progress_violations(Fault::None, &every_kind, &failed("c", "WAIT_TIMEOUT")).is_empty(), "a failure no fault explains");
    assert!(
        !progress_violations(Fault::Restart, &every_kind, &failed("c", "INVALID_KEY")).is_empty(),
        "a failure the fault does not explain"
    );
    assert!(progress_violations(Fault::Restart, &every_kind, &failed("c", "PROVIDER_FAILED")).is_empty(), "a restart's failures");
    // A scenario fails when its fault did not happen as often as it names.
    let once = || vec!["SIGSTOP rust-0 in its section".to_string()];
    assert!(injection_violation(Fault::None, &[]).is_none(), "the baseline injects nothing");
    for fault in [
        Fault::Stop,
        Fault::Kill,
        Fault::Restart,
        Fault::Crash,
        Fault::Promote,
        Fault::SyncPromote,
        Fault::Terminate,
        Fault::SentinelFailover,
    ] {
        assert!(injection_violation(fault, &[]).is_some(), "a scenario that injected nothing");
        assert!(injection_violation(fault, &once()).is_none(), "one fault injected");
    }
    assert!(injection_violation(Fault::Crash, &[once(), once()].concat()).is_some(), "a crash meant once, twice");
    assert!(injection_violation(Fault::Stop, &[once(), once()].concat()).is_none(), "pauses repeat");
    // A grant told before a failover, which the promoted replica lost.
    let mut on_k1 = hold("c-1", 7, 0, 10, "OK");
    on_k1.key = "k1".into();
    let told = [hold("rust-0", 5, 0, 10, "OK"), on_k1];
    let fences = BTreeMap::from([("k0".to_string(), 5), ("k1".to_string(), 6)]);
    assert_eq!(lost_grants(&told, &fences).len(), 1, "a key whose last fence on the new primary is below a told grant's");
    assert!(lost_grants(&told[..1], &fences).is_empty(), "a grant the replica had");
    assert_eq!(lost_grants(&told[..1], &BTreeMap::new()).len(), 1, "a key the replica never had");
    check::self_test_policy();
    let moved = log::parse("rust-0", "A k1 5 10 x 9 redis\nQ 20\nE k1 5 10 20 W OK x 9 postgres\n");
    assert_eq!(moved.moved.len(), 1, "a lease that ended on another member than its grant's");
    assert_eq!(selected(None).map(|s| s.len()), Ok(SCENARIOS.len()), "no FAULTS_ONLY: every scenario");
    assert_eq!(selected(Some("baseline,kill-pubsub")).map(|s| s.len()), Ok(2));
    assert!(selected(Some("baseline,kill-pubsubb")).is_err(), "a misspelt name");
    assert!(selected(Some("")).is_err(), "no name");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        worker::run(WorkerArgs::parse(&args[1..]));
        return;
    }
    self_test();
    let c_worker = PathBuf::from(std::env::var("FAULTS_C_WORKER").expect("FAULTS_C_WORKER names the C worker: run scripts/test-faults"));
    let seconds: u64 = std::env::var("FAULTS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3);
    let scenarios = selected(std::env::var("FAULTS_ONLY").ok().as_deref()).unwrap_or_else(|problem| {
        eprintln!("fault suite: {problem}");
        std::process::exit(2);
    });
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("faults");

    let mut rows = Vec::new();
    for scenario in scenarios {
        let row = run_scenario(scenario, Duration::from_secs(seconds), &c_worker, &root);
        for violation in &row.findings.violations {
            eprintln!("VIOLATION [{}] {violation}", row.name);
        }
        rows.push(row);
    }
    println!("\nfault suite: {seconds} s per scenario ({} s with a failover or a crash), lease {LEASE_MS} ms, {KEYS} keys, 2 Rust + 2 C + 2 Node workers (logs in {})", FAILOVER_RUN.as_secs().max(seconds), root.display());
    println!("lost: releases told LEASE_LOST or OUTCOME_UNKNOWN; stale/told: sections overlapped by a newer fence or refused by the store / of which told");
    println!(
        "{:<23} {:>7} {:>6} {:>6} {:>9} {:>5} {:>8} {:>11} {:>8} {:>8} {:>10}",
        "scenario", "workers", "ops", "faults", "acq.fail", "lost", "overlaps", "stale/told", "accepted", "refused", "violations"
    );
    let mut violations = 0;
    for row in &rows {
        let f = &row.findings;
        violations += f.violations.len();
        println!(
            "{:<23} {:>7} {:>6} {:>6} {:>9} {:>5} {:>8} {:>11} {:>8} {:>8} {:>10}",
            row.name,
            row.workers,
            f.holds,
            row.faults.len(),
            row.failures.values().sum::<u64>(),
            f.lost,
            f.overlaps,
            format!("{}/{}", f.stale, f.told),
            f.accepted,
            f.refused,
            f.violations.len()
        );
    }
    for row in rows.iter().filter(|row| !row.faults.is_empty()) {
        // The first few targets, and how many of each kind of fault.
        let shown: Vec<&str> = row.faults.iter().take(4).map(String::as_str).collect();
        let more = row.faults.len().saturating_sub(shown.len());
        let more = if more > 0 { format!("; {more} more") } else { String::new() };
        println!("{}: faults injected: {}{more}", row.name, shown.join("; "));
    }
    for row in rows.iter().filter(|row| !row.failures.is_empty()) {
        let failures: Vec<String> = row.failures.iter().map(|((kind, code), count)| format!("{kind} {code} {count}")).collect();
        println!("{}: failed acquires by worker kind and code: {}", row.name, failures.join(", "));
    }
    for row in &rows {
        if let Some((told, lost)) = &row.lost_grants {
            println!(
                "{}: {told} sections open when the primary crashed; grants the promoted replica lost: {} {lost:?}",
                row.name,
                lost.len()
            );
        }
    }
    for row in rows.iter().filter(|row| row.limit > 0) {
        let f = &row.findings;
        let (most, fresh, limit) = f.max_units.unwrap_or((0, 0, row.limit));
        println!(
            "{}: sections {} writer / {} reader / {} counted; {} reader pairs overlapped (allowed), {} reads accepted; counted k{}: at most {most} of {limit} units at once ({fresh} without the told stale holders), {} starts over the limit",
            row.name,
            f.holds - f.readers - f.counted,
            f.readers,
            f.counted,
            f.shared_overlaps,
            f.reads,
            KEYS - 1,
            f.over_limit
        );
    }
    for row in &rows {
        for rule in &row.findings.rules {
            let grants: Vec<String> = rule.grants.iter().map(|(member, n)| format!("{member} {n}")).collect();
            let allowed = if rule.fall_back { "allowed inside the outage" } else { "none allowed" };
            println!(
                "{}: {} ({}): grants {}; fallbacks {}; NO_ELIGIBLE_BACKEND {} of which placed on Redis by another try {}; overlaps {} of which cross-backend {} ({allowed}); refused by the store for the other member's fence {}",
                row.name,
                rule.label,
                if rule.fall_back { "fallBack" } else { "failClosed" },
                grants.join(", "),
                rule.fallbacks,
                rule.refusals,
                rule.placed_refusals,
                rule.overlaps,
                rule.cross_overlaps,
                rule.cross_refused
            );
        }
        if let Some((took_over, served)) = &row.failover {
            let served =
                served.as_ref().map_or("never".to_string(), |(after, worker)| format!("{} ms (worker {worker})", after.as_millis()));
            println!(
                "{}: run {} s; a replica took over {} ms after the kill; its keys granted again after {served} (bound {} s); first grant by kind: {}",
                row.name,
                FAILOVER_RUN.as_secs().max(seconds),
                took_over.as_millis(),
                FAILOVER_BOUND.as_secs(),
                row.failover_by_kind
            );
        }
    }
    if violations > 0 {
        eprintln!("fault suite: {violations} violations");
        std::process::exit(1);
    }
}
