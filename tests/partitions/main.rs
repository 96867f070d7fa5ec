//! The partition harness (issue 39 §1, and §2's Sentinel, Cluster,
//! Postgres and slow-network scenarios): a deployment in network
//! namespaces, split by a real network partition, with clients on both
//! sides; run it with `scripts/test-partitions` (root: `ip netns`). One
//! scenario per topology and setting: `sentinel-partition` and
//! `cluster-partition` without replica acknowledgement,
//! `sentinel-partition-acks` and `cluster-partition-acks` with
//! `replicaAcks: 1`, `sentinel-lossy` (no partition: 5% of the packets lost
//! each way on every client's link, by nftables, no delay),
//! `sentinel-deaf-client` (a one-way cut: a client's requests reach the
//! primary, its answers are lost), `sentinel-one-way` and
//! `sentinel-one-way-acks` (the partition one-way: the old primary and its
//! client hear nothing from the majority, which still hears them),
//! `slow-network` (every client's link a
//! user-space wire, `wire.rs`, holding each frame 50 ms each way and losing
//! 5%: this kernel has no `sch_netem`), the postgres ones of `pg.rs`
//! (`pg-commit-cut`, `pg-failover`, `pg-failover-sync`), the mysql ones of
//! `mysql.rs` (`mysql-partition`, `mysql-partition-semisync`) and `clock-skew` (a
//! replica whose clock runs behind promoted, see `clock.rs`) (one, a few,
//! or all with `PARTITIONS_ONLY=<name>,<name>`; the partition lasts
//! `PARTITIONS_SECONDS` after the promotion, 3 by default). The long form,
//! `PARTITIONS_LONG_S=<seconds>`, cycles partitions and heals per topology
//! and prints the totals (see [`long_form`]).
//!
//! The deployments, one namespace per server (see `net.rs`): Sentinel, a
//! primary `p`, two replicas `r1` `r2` and three sentinels (quorum 2,
//! `down-after-milliseconds` 1000); Cluster, six nodes made 3 primaries
//! with a replica each (`cluster-node-timeout` 1000). Three client processes
//! `c1` `c2` `c3`, one namespace each (the fault suite's Rust worker,
//! `tests/faults/worker.rs`: acquire, fenced read-modify-write of a store
//! every client reaches, release, each event logged with the time).
//! Timeline: the clients run for a while; `c1` and a primary (Sentinel's;
//! in the cluster, the primary holding the most of the lock's names) are
//! cut off from everything else (the minority); the majority promotes a
//! replica; both sides go on for a while; the network heals; the old
//! primary becomes a replica; the clients run on, then stop.
//!
//! The checks (see [`check_history`], proved able to fail by [`self_test`]),
//! per key, over every client's history and the store's own:
//! - no fence is ever granted twice;
//! - the store never accepts a write whose fence is below one it accepted,
//!   and loses no increment;
//! - a section's fence is above that of every section that ended before it
//!   began, and a write the store refused was overtaken by a higher fence,
//!   but across the two primaries;
//! - every interval in which two holders overlapped is explained by a
//!   documented window, or counted as a violation: two live primaries from
//!   the promotion on, each granting to its side, "partitioned old primary"
//!   (the minority's client granted while cut off, when the old primary is
//!   all it reaches, against a majority client granted after the
//!   promotion) and "old primary after the heal, before its demotion" (the
//!   minority's client granted then by the old primary, as its own
//!   `MONITOR` record shows: see `monitor.rs`) (both expected without
//!   replica acknowledgement, violations with it); or "expired lease" (the
//!   older holder told `LEASE_LOST` / `OUTCOME_UNKNOWN` at its release, the
//!   newer one begun a lease after the older one's acquire was called);
//! - with `replicaAcks: 1` the minority's client is granted nothing while
//!   cut off, and learns (an acquire failing) within [`LEARN_BOUND`];
//! - after healing, the old primary is a replica within [`REJOIN_BOUND`].

mod clock;
#[allow(dead_code)]
#[path = "../faults/log.rs"]
mod log;
mod monitor;
mod mysql;
#[allow(dead_code)]
#[path = "../support/names.rs"]
mod names;
mod net;
mod pg;
#[path = "../support/pg_programs.rs"]
mod pg_programs;
#[allow(dead_code)]
#[path = "../faults/store.rs"]
mod store;
mod wire;
#[allow(dead_code)]
#[path = "../faults/worker.rs"]
mod worker;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use log::{mono_us, Hold};
use net::{Net, SUBNET};
use store::Attempt;

const LEASE_MS: u32 = 1000;
const COMMAND_TIMEOUT_MS: u32 = 800;
const KEYS: u32 = 2;
const HOLD_MS: u32 = 15;
const PRIMARY_NAME: &str = "mymaster";
/// The clients' run before the cut, and after the heal.
const BEFORE_CUT: Duration = Duration::from_millis(1500);
const AFTER_HEAL: Duration = Duration::from_millis(2500);
/// How soon the majority's sentinels must promote a replica after the cut:
/// `down-after-milliseconds` (1 s), the election and the promotion, and
/// slack for a loaded machine.
const PROMOTION_BOUND: Duration = Duration::from_secs(15);
/// How soon after the heal the old primary must be a replica: the
/// sentinels see it again at their next `INFO` (every second, every 10 s
/// for a primary they think down), then send it `REPLICAOF`.
const REJOIN_BOUND: Duration = Duration::from_secs(25);
/// The clients' `waitTimeoutMs`.
const WAIT_TIMEOUT_MS: u32 = 3000;
/// With `replicaAcks`, how soon after the cut the minority's client must
/// learn (an acquire failing): an acquire under way at the cut that cannot
/// reach its key's primary (in a cluster, one on the majority's side) keeps
/// trying until its wait ends, then fails `PROVIDER_FAILED` (a run saw 3.3
/// s); one on the old primary fails once its `WAIT` gives up (3/4 of
/// `commandTimeoutMs`, 0.6-1.7 s seen). Plus slack.
const LEARN_BOUND: Duration = Duration::from_millis(WAIT_TIMEOUT_MS as u64 + COMMAND_TIMEOUT_MS as u64 + 500);
/// How long another client may wait for a key while one client is deaf: a
/// key granted to the deaf client without its hearing of it stays held
/// until its lease ends, and each of the deaf client's retries of that
/// acquire (idempotent: the same token) reaches the primary and sets the
/// lease anew, for as long as it goes on trying (`waitTimeoutMs`). So a
/// lease after its last try, plus slack for the queue and a loaded machine.
const DEAF_WAIT_BOUND: Duration = Duration::from_millis(WAIT_TIMEOUT_MS as u64 + LEASE_MS as u64 + 500);

struct Scenario {
    name: &'static str,
    replica_acks: u32,
    /// A Redis Cluster (3 primaries, 3 replicas) instead of Sentinel.
    cluster: bool,
    /// Instead of a partition, this percentage of the packets lost each
    /// way on every client's link (no delay: see [`Net::netem_missing`]).
    loss: u8,
    /// Instead of a partition, a one-way cut: the minority's client no
    /// longer hears the primary, whose answers are lost, while its
    /// requests still arrive and are acted on.
    deaf: bool,
    /// The partition one-way: the minority (the old primary and its
    /// client) no longer hears the majority, which still hears it.
    one_way: bool,
    /// With `loss`: every client's data link is a user-space wire (see
    /// `wire.rs`) that also holds each frame this long, each way.
    delay_ms: u32,
}

const SCENARIOS: &[Scenario] = &[
    Scenario { name: "sentinel-partition", replica_acks: 0, cluster: false, loss: 0, deaf: false, one_way: false, delay_ms: 0 },
    Scenario { name: "sentinel-partition-acks", replica_acks: 1, cluster: false, loss: 0, deaf: false, one_way: false, delay_ms: 0 },
    Scenario { name: "cluster-partition", replica_acks: 0, cluster: true, loss: 0, deaf: false, one_way: false, delay_ms: 0 },
    Scenario { name: "cluster-partition-acks", replica_acks: 1, cluster: true, loss: 0, deaf: false, one_way: false, delay_ms: 0 },
    Scenario { name: "sentinel-lossy", replica_acks: 0, cluster: false, loss: 5, deaf: false, one_way: false, delay_ms: 0 },
    Scenario { name: "sentinel-deaf-client", replica_acks: 0, cluster: false, loss: 0, deaf: true, one_way: false, delay_ms: 0 },
    Scenario { name: "sentinel-one-way", replica_acks: 0, cluster: false, loss: 0, deaf: false, one_way: true, delay_ms: 0 },
    Scenario { name: "sentinel-one-way-acks", replica_acks: 1, cluster: false, loss: 0, deaf: false, one_way: true, delay_ms: 0 },
    Scenario { name: "slow-network", replica_acks: 0, cluster: false, loss: 5, deaf: false, one_way: false, delay_ms: 50 },
];

/// The scenario of a primary promoted with its clock behind (`clock.rs`).
const CLOCK_SKEW: &str = "clock-skew";

/// The nodes: name, host number, on the store network.
const SERVERS: [(&str, u8); 3] = [("p", 1), ("r1", 2), ("r2", 3)];
const SENTINELS: [(&str, u8); 3] = [("s1", 11), ("s2", 12), ("s3", 13)];
const CLIENTS: [(&str, u8); 3] = [("c1", 21), ("c2", 22), ("c3", 23)];
const STORE: (&str, u8) = ("store", 30);
/// The cluster's nodes: 3 primaries and 3 replicas, as `redis-cli --cluster
/// create` pairs them.
const CLUSTER_NODES: [(&str, u8); 6] = [("n1", 1), ("n2", 2), ("n3", 3), ("n4", 4), ("n5", 5), ("n6", 6)];
/// The minority: the old primary and this client.
const MINORITY_CLIENT: &str = "c1";

/// What one scenario showed.
#[derive(Default)]
struct Report {
    name: &'static str,
    replica_acks: u32,
    grants: u64,
    /// Grants to the minority's client while cut off (the old primary is
    /// all it reaches), and between the heal and the old primary's demotion
    /// (by whichever primary it reached); to the majority's clients while
    /// the minority was cut off.
    minority_grants: u64,
    minority_after_heal: u64,
    majority_grants: u64,
    /// Overlapping pairs of sections by cause.
    overlaps: BTreeMap<&'static str, u64>,
    /// Fences granted twice, once by the partitioned old primary and once
    /// by the majority's.
    repeated_across: u64,
    /// Writes the store accepted from the minority's sections while cut off.
    minority_accepted: u64,
    accepted: u64,
    refused: u64,
    failures: BTreeMap<String, u64>,
    /// After the cut: the promotion, the heal.
    promoted_ms: u128,
    partition_ms: u128,
    /// First failure the minority's client saw after the cut.
    learned_ms: Option<u128>,
    /// After the heal: the old primary a replica.
    rejoined_ms: Option<u128>,
    /// A lossy scenario: its loss, and how long acquires took to be granted
    /// (from the call to the section) before it and during it.
    loss: u8,
    delay_ms: u32,
    latency: Option<(Latency, Latency)>,
    violations: Vec<String>,
    /// A scenario of its own kind (postgres): reported by its `notes`.
    custom: bool,
    notes: Vec<String>,
}

/// `dir`, emptied (a scenario's logs of an earlier run removed).
fn fresh(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    dir.to_path_buf()
}

fn redis_args(name: &str, dir: &Path, ip: &str, replica_of: Option<&str>) -> Vec<String> {
    let data = dir.join(name);
    std::fs::create_dir_all(&data).unwrap();
    let mut args: Vec<String> = [
        "--bind",
        ip,
        "--port",
        "6379",
        "--protected-mode",
        "no",
        "--save",
        "",
        "--appendonly",
        "no",
        "--repl-diskless-sync",
        "yes",
        "--repl-diskless-sync-delay",
        "0",
        "--dir",
        data.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(primary) = replica_of {
        args.extend(["--replicaof".to_string(), primary.to_string(), "6379".to_string()]);
    }
    args
}

/// The value after `field` in redis-cli's one-per-line output of a flat reply.
fn field<'a>(reply: &'a str, field: &str) -> Option<&'a str> {
    let lines: Vec<&str> = reply.lines().collect();
    lines.iter().position(|l| *l == field).and_then(|i| lines.get(i + 1).copied())
}

fn until(what: &str, bound: Duration, mut ready: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
        sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

fn yaml(replica_acks: u32, cluster: bool) -> String {
    let endpoint = if cluster {
        let nodes: Vec<String> = CLUSTER_NODES.iter().map(|(_, n)| format!("redis://{SUBNET}.0.{n}:6379")).collect();
        format!("cluster: {{ nodes: [{}] }}", nodes.join(", "))
    } else {
        let nodes: Vec<String> = SENTINELS.iter().map(|(_, n)| format!("redis://{SUBNET}.0.{n}:26379")).collect();
        format!("sentinel: {{ nodes: [{}], primaryName: {PRIMARY_NAME} }}", nodes.join(", "))
    };
    let acks = if replica_acks > 0 { format!(", replicaAcks: {replica_acks}") } else { String::new() };
    format!(
        "schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n      faults: {{ driver: redis, connection: main, namespace: parts, leaseMs: {LEASE_MS}, waitTimeoutMs: {WAIT_TIMEOUT_MS}, pollIntervalMs: 20{acks} }}\n  dokebi-redis:\n    connections:\n      main:\n        connectTimeoutMs: 500\n        commandTimeoutMs: {COMMAND_TIMEOUT_MS}\n        {endpoint}\n"
    )
}

/// A primary, two replicas and three sentinels; returns once every sentinel
/// knows both replicas and the other sentinels.
fn start_sentinel(net: &mut Net, dir: &Path) {
    let redis = PathBuf::from("redis-server");
    let primary = net.addr("p");
    for (name, _) in SERVERS {
        let args = redis_args(name, dir, &net.addr(name), (name != "p").then_some(primary.as_str()));
        net.spawn(name, &redis, &args, &[], &dir.join(format!("{name}.out")));
    }
    until("the replicas sync", Duration::from_secs(20), || {
        ["r1", "r2"].iter().all(|r| net.cli(r, &net.addr(r), 6379, &["INFO", "replication"]).contains("master_link_status:up"))
    });
    for (name, _) in SENTINELS {
        let ip = net.addr(name);
        let config = dir.join(format!("{name}.conf"));
        std::fs::write(
            &config,
            format!(
                "port 26379\nbind {ip}\nprotected-mode no\ndir {dir}\nlogfile {dir}/{name}.log\n\
                 sentinel monitor {PRIMARY_NAME} {primary} 6379 2\n\
                 sentinel down-after-milliseconds {PRIMARY_NAME} 1000\n\
                 sentinel failover-timeout {PRIMARY_NAME} 2000\n\
                 sentinel parallel-syncs {PRIMARY_NAME} 1\n",
                dir = dir.display()
            ),
        )
        .unwrap();
        net.spawn(name, &redis, &[config.display().to_string(), "--sentinel".into()], &[], &dir.join(format!("{name}.out")));
    }
    until("the sentinels find both replicas and each other", Duration::from_secs(30), || {
        SENTINELS.iter().all(|(s, _)| {
            let master = net.cli(s, &net.addr(s), 26379, &["SENTINEL", "MASTER", PRIMARY_NAME]);
            field(&master, "num-slaves") == Some("2") && field(&master, "num-other-sentinels") == Some("2")
        })
    });
}

/// Six cluster nodes (`cluster-node-timeout` 1000 ms), joined by
/// `redis-cli --cluster create` as 3 primaries with a replica each; returns
/// once every node says the cluster is ok.
fn start_cluster(net: &mut Net, dir: &Path) {
    let redis = PathBuf::from("redis-server");
    for (name, _) in CLUSTER_NODES {
        let mut args = redis_args(name, dir, &net.addr(name), None);
        let config = dir.join(name).join("nodes.conf");
        args.extend(
            ["--cluster-enabled", "yes", "--cluster-node-timeout", "1000", "--cluster-config-file", config.to_str().unwrap()]
                .map(String::from),
        );
        net.spawn(name, &redis, &args, &[], &dir.join(format!("{name}.out")));
    }
    until("every node answers", Duration::from_secs(20), || {
        CLUSTER_NODES.iter().all(|(n, _)| net.cli(n, &net.addr(n), 6379, &["PING"]) == "PONG")
    });
    let mut create = vec!["--cluster", "create"].into_iter().map(String::from).collect::<Vec<_>>();
    create.extend(CLUSTER_NODES.iter().map(|(n, _)| format!("{}:6379", net.addr(n))));
    create.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
    let created = net.exec("n1", "redis-cli", &create);
    assert!(created.contains("[OK] All 16384 slots covered"), "redis-cli --cluster create: {created}");
    until("the cluster is ok on every node", Duration::from_secs(30), || {
        CLUSTER_NODES.iter().all(|(n, _)| net.cli(n, &net.addr(n), 6379, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    });
}

/// The cluster's primary holding the most of the lock's names (the keys'
/// slots are the digests', so where they land is found, not chosen), and
/// its replica.
fn cluster_victim(net: &Net) -> (String, Option<String>) {
    let primaries = CLUSTER_NODES.iter().filter(|(n, _)| net.cli(n, &net.addr(n), 6379, &["ROLE"]).lines().next() == Some("master"));
    let (victim, _) = primaries
        .map(|(n, _)| (n.to_string(), net.cli(n, &net.addr(n), 6379, &["DBSIZE"]).parse::<u64>().unwrap_or(0)))
        .max_by_key(|(_, size)| *size)
        .expect("a primary");
    let nodes = net.cli(&victim, &net.addr(&victim), 6379, &["CLUSTER", "NODES"]);
    let id = nodes.lines().find(|l| l.contains("myself")).and_then(|l| l.split(' ').next()).expect("the node's own id").to_string();
    let replica_ip = nodes
        .lines()
        .find(|l| l.split(' ').nth(3) == Some(id.as_str()))
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|addr| addr.split(':').next())
        .expect("the primary's replica")
        .to_string();
    let replica = CLUSTER_NODES.iter().find(|(n, _)| net.addr(n) == replica_ip).map(|(n, _)| n.to_string());
    (victim, replica)
}

fn run_scenario(scenario: &Scenario, partition: Duration, root: &Path) -> Report {
    let dir = fresh(&root.join(scenario.name));
    let mut report = Report { name: scenario.name, replica_acks: scenario.replica_acks, ..Report::default() };

    let mut net = Net::new("dkp");
    let servers: &[(&str, u8)] = if scenario.cluster { &CLUSTER_NODES } else { &SERVERS };
    let sentinels: &[(&str, u8)] = if scenario.cluster { &[] } else { &SENTINELS };
    for (name, number) in servers.iter().chain(sentinels) {
        net.add(name, *number, false);
    }
    for (name, number) in CLIENTS.iter().chain([&STORE]) {
        if scenario.delay_ms > 0 && *name != STORE.0 {
            net.add_wired(name, *number, true, &std::env::current_exe().unwrap(), &dir.join(format!("wire-{name}")));
        } else {
            net.add(name, *number, true);
        }
    }
    net.seal();
    let redis = PathBuf::from("redis-server");
    let store_ip = format!("{SUBNET}.1.{}", STORE.1);
    let store_args = redis_args("store", &dir, &store_ip, None);
    net.spawn(STORE.0, &redis, &store_args, &[], &dir.join("store.out"));
    if scenario.cluster {
        start_cluster(&mut net, &dir);
    } else {
        start_sentinel(&mut net, &dir);
    }
    let mut store = redis::Client::open(format!("redis://{store_ip}:6379/0")).unwrap().get_connection().expect("the store answers");
    let scripts = store::load(&mut store);

    // The clients.
    let stop = dir.join("stop");
    let started = Instant::now();
    let workers = start_clients(&mut net, &dir, &store_ip, &scripts, &stop, |_| {
        yaml(if drop_acks() { 0 } else { scenario.replica_acks }, scenario.cluster)
    });

    // Each server's record of what it was sent, to tell which primary
    // granted the minority's client after the heal.
    let monitored: Vec<&str> = servers.iter().map(|(name, _)| *name).collect();
    if !scenario.deaf && scenario.loss == 0 {
        for name in &monitored {
            let args = vec!["monitor".to_string(), net.addr(name)];
            net.spawn(name, &std::env::current_exe().unwrap(), &args, &[], &dir.join(format!("monitor-{name}")));
        }
    }
    sleep(BEFORE_CUT);
    if scenario.deaf {
        return deaf_client(partition, net, &dir, &workers, &stop, &mut store, report);
    }
    if scenario.loss > 0 {
        return lossy(scenario, partition, net, &dir, &workers, &stop, &mut store, report);
    }
    // The partition: the old primary (in a cluster, the primary holding
    // the most of the lock's names) and one client cut off.
    let (old, replica) = if scenario.cluster { cluster_victim(&net) } else { ("p".to_string(), None) };
    let old_ip = net.addr(&old);
    // The client first, then the primary, and the cut counted from when
    // both are across: the client's requests from then on reach only the
    // old primary (while the two move, a client still on the data bridge
    // could be granted by a primary of the majority).
    if scenario.one_way {
        net.deafen_group(&[MINORITY_CLIENT, old.as_str()]);
    } else {
        net.isolate(&[MINORITY_CLIENT, old.as_str()]);
    }
    let cut_at = mono_us();
    let fence_clock = FenceClock::now();
    // The promotion, at the earliest: the last time every replica that
    // may be promoted still answered it was one (each was asked after).
    let candidates: Vec<String> = match &replica {
        Some(replica) => vec![replica.clone()],
        None => SERVERS.iter().map(|(name, _)| name.to_string()).filter(|name| *name != old).collect(),
    };
    let mut promoted_at = cut_at;
    let promoted = until("a replica promoted by the majority", PROMOTION_BOUND, || {
        let asked = mono_us();
        let promoted = candidates.iter().any(|r| net.cli(r, &net.addr(r), 6379, &["ROLE"]).lines().next() == Some("master"));
        if !promoted {
            promoted_at = asked;
        }
        promoted
    });
    report.promoted_ms = promoted.as_millis();
    sleep(partition);
    if scenario.one_way {
        net.hear(MINORITY_CLIENT);
        net.hear(&old);
    } else {
        net.heal();
    }
    let healed_at = mono_us();
    report.partition_ms = u128::from(healed_at - cut_at) / 1000;
    let rejoined = Instant::now();
    let mut rejoined_at = None;
    while rejoined.elapsed() < REJOIN_BOUND {
        if net.cli(&old, &old_ip, 6379, &["ROLE"]).lines().next() == Some("slave") {
            rejoined_at = Some(mono_us());
            report.rejoined_ms = Some(rejoined.elapsed().as_millis());
            break;
        }
        sleep(Duration::from_millis(50));
    }
    if rejoined_at.is_none() {
        report.violations.push(format!("the old primary was not a replica {REJOIN_BOUND:?} after the heal"));
    }
    let (holds, stores) = wind_down(&mut net, &dir, &workers, &mut store, started, cut_at, &mut report);
    let window_end = rejoined_at.unwrap_or(u64::MAX);
    let logs = monitor::logs(&dir, &monitored);
    let by_old = monitor::granted_by(&old, MINORITY_CLIENT, &net.addr(MINORITY_CLIENT), &holds, &logs, fence_clock.offset_us);
    let window = Window { cut_at, promoted_at, healed_at, demoted_at: window_end, fence_clock, by_old };
    std::fs::write(
        dir.join("timeline"),
        format!("cut {cut_at}\nhealed {healed_at}\ndemoted {window_end}\nrealtime-minus-monotonic {}\n", fence_clock.offset_us),
    )
    .unwrap();
    check_history(&holds, &stores, &window, scenario.replica_acks, &mut report);
    check_failover(&mut report);
    report
}

/// The client processes `c1` `c2` `c3`, each the fault suite's Rust
/// worker in its own namespace, with the options `yaml(name)`; they run
/// until `stop` exists.
fn start_clients(
    net: &mut Net,
    dir: &Path,
    store_ip: &str,
    scripts: &store::Scripts,
    stop: &Path,
    yaml: impl Fn(&str) -> String,
) -> Vec<(String, u32, PathBuf)> {
    let exe = std::env::current_exe().unwrap();
    let mut workers = Vec::new();
    for (i, (name, _)) in CLIENTS.iter().enumerate() {
        let log = dir.join(format!("{name}.log"));
        let args = worker::WorkerArgs {
            store_port: 6379,
            keys: KEYS,
            hold_ms: HOLD_MS,
            run_ms: 120_000,
            log: log.display().to_string(),
            seed: mono_us() ^ ((i as u64) << 48),
            read_sha: scripts.read.clone(),
            write_sha: scripts.write.clone(),
            shared_read_sha: scripts.shared_read.clone(),
            limit: 0,
        };
        let mut argv = vec!["worker".to_string()];
        argv.extend(args.to_args());
        let env = [
            (worker::YAML_VAR, yaml(name)),
            (worker::STORE_HOST_VAR, store_ip.to_string()),
            (worker::STOP_FILE_VAR, stop.display().to_string()),
        ];
        let pid = net.spawn(name, &exe, &argv, &env, &dir.join(format!("{name}.stderr")));
        workers.push((name.to_string(), pid, log));
    }
    workers
}

/// After a heal: the clients run on for [`AFTER_HEAL`], are told to stop
/// (the file `stop` in `dir`) and exit; every client's sections, and each
/// key's history in the fenced `store`.
fn wind_down(
    net: &mut Net,
    dir: &Path,
    workers: &[(String, u32, PathBuf)],
    store: &mut redis::Connection,
    started: Instant,
    cut_at: u64,
    report: &mut Report,
) -> (Vec<Hold>, BTreeMap<String, store::KeyHistory>) {
    sleep(AFTER_HEAL);
    stop_clients(net, dir, workers, &dir.join("stop"), report);
    eprintln!("[{}] ran {} ms", report.name, started.elapsed().as_millis());
    let holds = histories(workers, cut_at, report);
    let stores = (0..KEYS).map(|k| format!("k{k}")).map(|key| (key.clone(), store::history(store, &key))).collect();
    (holds, stores)
}

/// Tells the clients to stop, and waits for each to exit by itself.
fn stop_clients(net: &mut Net, dir: &Path, workers: &[(String, u32, PathBuf)], stop: &Path, report: &mut Report) {
    std::fs::write(stop, "").unwrap();
    for (name, pid, _) in workers {
        match net.wait(*pid, Duration::from_secs(15)) {
            Some(true) => {}
            Some(false) => report.violations.push(format!("client {name} failed (see {}/{name}.stderr)", dir.display())),
            None => report.violations.push(format!("client {name} did not stop by itself")),
        }
    }
}

/// Every client's sections, its failures counted in `report`, and when the
/// minority's client first failed after `cut_at`.
fn histories(workers: &[(String, u32, PathBuf)], cut_at: u64, report: &mut Report) -> Vec<Hold> {
    let mut holds: Vec<Hold> = Vec::new();
    for (name, _, log) in workers {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let parsed = log::parse(name, &text);
        if let Some(open) = parsed.open {
            report.violations.push(format!("client {name} left a section open on {}", open.key));
        }
        for (code, count) in parsed.failures {
            *report.failures.entry(format!("{name} {code}")).or_default() += count;
        }
        if name == MINORITY_CLIENT {
            // The first failure (an acquire failing, or a release told) after the cut.
            let failed = text.lines().filter_map(|line| match line.split(' ').collect::<Vec<_>>().as_slice() {
                ["F", _, at, ..] => at.parse::<u64>().ok(),
                ["E", _, _, _, end, _, release, ..] if !matches!(*release, "OK" | "FALSE") => end.parse().ok(),
                _ => None,
            });
            report.learned_ms = failed.filter(|at| *at > cut_at).min().map(|at| u128::from(at - cut_at) / 1000);
        }
        holds.extend(parsed.holds);
    }
    holds
}

/// The acquires' latencies, from the call to the section, in ms.
#[derive(Clone, Copy, Default)]
struct Latency {
    grants: usize,
    p50: f64,
    p99: f64,
    max: f64,
}

impl Latency {
    fn of(holds: &[&Hold]) -> Latency {
        let mut ms: Vec<f64> = holds.iter().map(|h| h.start.saturating_sub(h.asked) as f64 / 1000.0).collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| ms.get(((ms.len() as f64 * q) as usize).min(ms.len().saturating_sub(1))).copied().unwrap_or(0.0);
        Latency { grants: ms.len(), p50: at(0.5), p99: at(0.99), max: ms.last().copied().unwrap_or(0.0) }
    }
}

/// The rest of a lossy scenario, once the clients ran `BEFORE_CUT`: every
/// client's link loses `scenario.loss`% of its packets each way for 2 s
/// more than a partition lasts, then none. The same history checks, with
/// no partition to explain an overlap: only a holder told its lease may
/// be gone does; and the clients must go on being granted.
#[allow(clippy::too_many_arguments)] // the scenario's parts, as run_scenario holds them
fn lossy(
    scenario: &Scenario,
    partition: Duration,
    mut net: Net,
    dir: &Path,
    workers: &[(String, u32, PathBuf)],
    stop: &Path,
    store: &mut redis::Connection,
    mut report: Report,
) -> Report {
    report.loss = scenario.loss;
    report.delay_ms = scenario.delay_ms;
    for (name, _) in CLIENTS {
        if scenario.delay_ms > 0 {
            // PARTITIONS_BREAK=1: a wire too slow for anything to be granted.
            let delay = if break_cut() { 5000 } else { scenario.delay_ms };
            std::fs::write(dir.join(format!("wire-{name}")), format!("{delay} {}", scenario.loss)).unwrap();
        } else {
            net.lossy(name, scenario.loss);
        }
    }
    // The wires read their settings every 20 ms.
    let lossy_at = mono_us() + if scenario.delay_ms > 0 { 40_000 } else { 0 };
    sleep(partition + Duration::from_secs(2));
    for (name, _) in CLIENTS {
        if scenario.delay_ms > 0 {
            std::fs::remove_file(dir.join(format!("wire-{name}"))).unwrap();
        } else {
            net.lossless(name);
        }
    }
    let lossless_at = mono_us();
    report.partition_ms = u128::from(lossless_at - lossy_at) / 1000;
    sleep(Duration::from_millis(500));
    std::fs::write(stop, "").unwrap();
    for (name, pid, _) in workers {
        match net.wait(*pid, Duration::from_secs(15)) {
            Some(true) => {}
            Some(false) => report.violations.push(format!("client {name} failed (see {}/{name}.stderr)", dir.display())),
            None => report.violations.push(format!("client {name} did not stop by itself")),
        }
    }
    let mut holds: Vec<Hold> = Vec::new();
    for (name, _, log) in workers {
        let parsed = log::parse(name, &std::fs::read_to_string(log).unwrap_or_default());
        if let Some(open) = parsed.open {
            report.violations.push(format!("client {name} left a section open on {}", open.key));
        }
        for (code, count) in parsed.failures {
            *report.failures.entry(format!("{name} {code}")).or_default() += count;
        }
        holds.extend(parsed.holds);
    }
    let stores: BTreeMap<String, store::KeyHistory> =
        (0..KEYS).map(|k| format!("k{k}")).map(|key| (key.clone(), store::history(store, &key))).collect();
    // No partition: no window explains an overlap.
    check_history(&holds, &stores, &Window::never(FenceClock::now()), 0, &mut report);
    let before: Vec<&Hold> = holds.iter().filter(|h| h.asked < lossy_at).collect();
    let during: Vec<&Hold> = holds.iter().filter(|h| h.asked >= lossy_at && h.start < lossless_at).collect();
    report.majority_grants = during.len() as u64;
    report.latency = Some((Latency::of(&before), Latency::of(&during)));
    if during.is_empty() {
        report.violations.push(format!("nothing was granted while {}% of the packets were lost", scenario.loss));
    }
    report
}

/// The rest of a one-way scenario, once the clients ran `BEFORE_CUT`: the
/// minority's client stops hearing the primary for as long as a partition
/// lasts (its requests arrive: the primary grants, renews and releases as
/// asked; its answers are lost), then hears it again. No promotion (the
/// sentinels hear the primary). The same history checks with no window
/// to explain an overlap (only a holder told its lease may be gone); the
/// client must hear `OUTCOME_UNKNOWN` (a grant it never heard of is
/// released by token in the background, or ends with its lease), the
/// others go on being granted, and it is granted again once it hears.
fn deaf_client(
    partition: Duration,
    mut net: Net,
    dir: &Path,
    workers: &[(String, u32, PathBuf)],
    stop: &Path,
    store: &mut redis::Connection,
    mut report: Report,
) -> Report {
    if !break_cut() {
        net.deafen(MINORITY_CLIENT, "p");
    }
    let deaf_at = mono_us();
    sleep(partition);
    if !break_cut() {
        net.hear(MINORITY_CLIENT);
    }
    let hears_at = mono_us();
    report.partition_ms = u128::from(hears_at - deaf_at) / 1000;
    sleep(Duration::from_millis(1500));
    stop_clients(&mut net, dir, workers, stop, &mut report);
    let holds = histories(workers, deaf_at, &mut report);
    let stores: BTreeMap<String, store::KeyHistory> =
        (0..KEYS).map(|k| format!("k{k}")).map(|key| (key.clone(), store::history(store, &key))).collect();
    check_history(&holds, &stores, &Window::never(FenceClock::now()), 0, &mut report);
    let text = std::fs::read_to_string(dir.join(format!("{MINORITY_CLIENT}.log"))).unwrap_or_default();
    let told = |code: &str| {
        text.lines()
            .filter(|l| match l.split(' ').collect::<Vec<_>>().as_slice() {
                ["F", c, at, ..] => *c == code && at.parse::<u64>().is_ok_and(|at| (deaf_at..hears_at + 1_000_000).contains(&at)),
                // A section's line carries when its release was asked: one
                // asked up to a command timeout before the cut may still
                // have been waiting for the answer the cut lost.
                ["E", _, _, _, end, _, release, ..] => {
                    let since = deaf_at.saturating_sub(u64::from(COMMAND_TIMEOUT_MS) * 1000);
                    *release == code && end.parse::<u64>().is_ok_and(|at| (since..hears_at + 1_000_000).contains(&at))
                }
                _ => false,
            })
            .count()
    };
    let unknown = told("OUTCOME_UNKNOWN");
    let during: Vec<&Hold> = holds.iter().filter(|h| h.worker != MINORITY_CLIENT && h.asked >= deaf_at && h.start < hears_at).collect();
    let minority_during = holds.iter().filter(|h| h.worker == MINORITY_CLIENT && h.start >= deaf_at && h.start < hears_at).count();
    let again = holds.iter().filter(|h| h.worker == MINORITY_CLIENT && h.asked > hears_at).count();
    report.majority_grants = during.len() as u64;
    report.minority_grants = minority_during as u64;
    let latency = Latency::of(&during);
    report.custom = true;
    report.notes.push(format!(
        "the client heard nothing from the primary for {} ms (its requests arrived): it heard OUTCOME_UNKNOWN {unknown} times, PROVIDER_FAILED {} times, was granted {minority_during} times then and {again} times after",
        report.partition_ms,
        told("PROVIDER_FAILED")
    ));
    report.notes.push(format!(
        "the other clients meanwhile: {} grants, acquire to section p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        latency.grants, latency.p50, latency.p99, latency.max
    ));
    report.notes.push(format!(
        "grants {} in all; overlapping pairs: {}; store: {} accepted, {} refused",
        report.grants,
        if report.overlaps.is_empty() {
            "none".into()
        } else {
            report.overlaps.iter().map(|(c, n)| format!("{n} {c}")).collect::<Vec<_>>().join(", ")
        },
        report.accepted,
        report.refused
    ));
    if unknown == 0 {
        report.violations.push("the deaf client never heard OUTCOME_UNKNOWN".into());
    }
    if minority_during > 0 {
        report.violations.push(format!("the deaf client entered {minority_during} sections while it heard nothing"));
    }
    if again == 0 {
        report.violations.push("the deaf client was granted nothing once it heard again".into());
    }
    if during.is_empty() {
        report.violations.push("the other clients were granted nothing while one was deaf".into());
    }
    if latency.max > DEAF_WAIT_BOUND.as_secs_f64() * 1000.0 {
        report.violations.push(format!(
            "another client waited {:.0} ms for a section while one was deaf, past the bound of {} ms",
            latency.max,
            DEAF_WAIT_BOUND.as_millis()
        ));
    }
    report
}

/// `PARTITIONS_BREAK=1`: `sentinel-deaf-client` leaves its client hearing
/// (no cut), `slow-network` holds each frame 5 s instead of 50 ms (nothing
/// can be granted), `pg-commit-cut` frees its stranded lease early, and
/// `pg-failover` and `mysql-partition` leave the old primary running after
/// the heal while the checks take it for stopped, as a failover without
/// fencing would (see pg.rs, mysql.rs): the checks of each must fail. By
/// hand.
fn break_cut() -> bool {
    std::env::var("PARTITIONS_BREAK").is_ok_and(|v| v == "1")
}

/// `PARTITIONS_DROP_ACKS=1`: the clients run without `replicaAcks` (the
/// servers of `pg-failover-sync` without synchronous replication, those of
/// `mysql-partition-semisync` without semi-synchronous replication) while
/// the checks still expect what it promises, so those scenarios must fail
/// (the checker's own proof against a real partition; by hand).
fn drop_acks() -> bool {
    std::env::var("PARTITIONS_DROP_ACKS").is_ok_and(|v| v == "1")
}

/// When the minority was cut off, when the majority's primary was
/// promoted (at the earliest), healed, and its old primary demoted
/// (`CLOCK_MONOTONIC` microseconds, as the clients log), how to read a fence
/// as the time of its grant, and which of the minority client's grants the
/// old primary made (its own record: `MONITOR`, or the audit rows).
#[derive(Clone)]
struct Window {
    cut_at: u64,
    promoted_at: u64,
    healed_at: u64,
    demoted_at: u64,
    fence_clock: FenceClock,
    /// The minority client's sections (key, start) granted by the old primary.
    by_old: BTreeSet<(String, u64)>,
}

/// A fence is `max(counter + 1, TIME_us)` of the server that granted it:
/// the granting server's wall clock in microseconds at the grant (or a few
/// microseconds past it, when several grants fall in one). Every server
/// here runs on this machine's clock, so a fence minus `offset_us`
/// (`CLOCK_REALTIME` minus `CLOCK_MONOTONIC`, read once back to back) is
/// when the grant was made on the clients' clock.
#[derive(Clone, Copy, Default)]
struct FenceClock {
    offset_us: i64,
}

impl FenceClock {
    /// `mono` (`CLOCK_MONOTONIC` us) on the servers' wall clock.
    fn real(&self, mono: u64) -> i64 {
        mono as i64 + self.offset_us
    }

    fn now() -> FenceClock {
        let mono = mono_us() as i64;
        let real = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64;
        FenceClock { offset_us: real - mono }
    }
}

impl Window {
    /// No partition: no window explains anything.
    fn never(fence_clock: FenceClock) -> Window {
        Window { cut_at: u64::MAX, promoted_at: u64::MAX, healed_at: u64::MAX, demoted_at: u64::MAX, fence_clock, by_old: BTreeSet::new() }
    }

    /// When `h` was granted: by its fence, within what the client saw (it
    /// asked at `asked`, and the section began at `start` once the answer
    /// came). `asked` and `start` alone do not place a grant whose acquire
    /// spans the cut or the heal: an acquire the minority's client began
    /// while cut off may go on trying until the heal and be granted by the
    /// new primary (runs saw `asked` 0.2-1.4 s before the heal and the
    /// grant after it).
    fn granted(&self, h: &Hold) -> u64 {
        let by_fence = (h.fence as i128 - i128::from(self.fence_clock.offset_us)).clamp(0, u64::MAX.into()) as u64;
        by_fence.clamp(h.asked, h.start.max(h.asked))
    }

    /// Granted to the minority's client while cut off: the old primary is
    /// all it reaches.
    fn cut_off(&self, h: &Hold) -> bool {
        h.worker == MINORITY_CLIENT && (self.cut_at..self.healed_at).contains(&self.granted(h))
    }

    /// Granted to the minority's client from the cut until the old primary
    /// was demoted: after the heal it may still be granted there, or by
    /// the new primary.
    fn minority(&self, h: &Hold) -> bool {
        h.worker == MINORITY_CLIENT && (self.cut_at..self.demoted_at).contains(&self.granted(h))
    }

    /// Granted to the minority's client by the old primary after the heal,
    /// before its demotion, by the old primary's own record.
    fn old_after_heal(&self, h: &Hold) -> bool {
        self.minority(h) && !self.cut_off(h) && self.by_old.contains(&(h.key.clone(), h.start))
    }

    /// Granted to a majority client by the new primary: after the
    /// promotion (the majority's clients reach nothing else after the cut).
    fn by_new_primary(&self, h: &Hold) -> bool {
        h.worker != MINORITY_CLIENT && self.granted(h) >= self.promoted_at
    }

    /// The windows of docs/guarantees.md: two live primaries, from the promotion on,
    /// each granting to its own side. `None` when `a` and `b` are not one
    /// grant of each.
    fn two_primaries(&self, a: &Hold, b: &Hold) -> Option<&'static str> {
        [(a, b), (b, a)].into_iter().find_map(|(old, new)| match () {
            _ if !self.by_new_primary(new) => None,
            _ if self.cut_off(old) => Some("partitioned old primary"),
            _ if self.old_after_heal(old) => Some("old primary after the heal, before its demotion"),
            _ => None,
        })
    }
}

/// A failover scenario's checks beyond the history's: with acknowledgement
/// by a replica the cut-off client learns within [`LEARN_BOUND`]; the
/// majority is granted something while cut apart.
fn check_failover(report: &mut Report) {
    if report.replica_acks > 0 {
        match report.learned_ms {
            Some(ms) if ms <= LEARN_BOUND.as_millis() => {}
            Some(ms) => report.violations.push(format!("the minority's client learned only {ms} ms after the cut (bound {LEARN_BOUND:?})")),
            None => report.violations.push("the minority's client never learned of the partition".into()),
        }
    }
    if report.majority_grants == 0 {
        report.violations.push("the majority's clients were granted nothing during the partition".into());
    }
}

/// A SQL failover scenario's note of its grants.
fn grants(report: &Report) -> String {
    format!(
        "grants: {} in all; while cut off: minority {} ({} store writes accepted), majority {}; fences granted by both primaries {}; the minority's client first failed {}",
        report.grants,
        report.minority_grants,
        report.minority_accepted,
        report.majority_grants,
        report.repeated_across,
        report.learned_ms.map_or("never".into(), |ms| format!("{ms} ms after the cut"))
    )
}

/// The last note of a scenario of its own kind: overlaps, the store's
/// answers, failed acquires.
fn outcome(report: &Report) -> String {
    let listed = |items: Vec<String>| if items.is_empty() { "none".to_owned() } else { items.join(", ") };
    format!(
        "overlapping pairs: {}; store: {} accepted, {} refused; failed acquires: {}",
        listed(report.overlaps.iter().map(|(c, n)| format!("{n} {c}")).collect()),
        report.accepted,
        report.refused,
        listed(report.failures.iter().map(|(c, n)| format!("{c} {n}")).collect())
    )
}

/// The checks of a scenario's history (see the top of this file): the
/// grants in the windows, then per key the fences, the overlaps and the
/// store's history; every finding that breaks a guarantee is a violation.
fn check_history(holds: &[Hold], stores: &BTreeMap<String, store::KeyHistory>, window: &Window, replica_acks: u32, report: &mut Report) {
    report.grants = holds.len() as u64;
    // The minority's client reaches only the old primary while cut off;
    // after the heal, until the old primary is demoted, it may still be
    // granted there. Each grant is placed by when it was made (see
    // `Window::granted`).
    let cut_off = |h: &Hold| window.cut_off(h);
    report.minority_grants = holds.iter().filter(|h| cut_off(h)).count() as u64;
    report.minority_after_heal = holds.iter().filter(|h| window.minority(h) && !cut_off(h)).count() as u64;
    report.majority_grants =
        holds.iter().filter(|h| h.worker != MINORITY_CLIENT && (window.cut_at..window.healed_at).contains(&window.granted(h))).count()
            as u64;
    report.minority_accepted = holds.iter().filter(|h| cut_off(h) && h.store == 'W').count() as u64;
    if replica_acks > 0 {
        let after_cut = |us: u64| (us as i64 - window.cut_at as i64) as f64 / 1000.0;
        for h in holds.iter().filter(|h| cut_off(h)) {
            report.violations.push(format!(
                "the minority's client was granted {} (fence {}) while cut off, despite replica acknowledgement (replicaAcks, or synchronous replication): asked {:.1} ms, granted {:.1} ms (by the fence), started {:.1} ms after the cut",
                h.key,
                h.fence,
                after_cut(h.asked),
                after_cut(window.granted(h)),
                after_cut(h.start),
            ));
        }
    }

    for (key, history) in stores {
        let mut of_key: Vec<&Hold> = holds.iter().filter(|h| &h.key == key).collect();
        of_key.sort_by_key(|h| h.start);
        // Fences never repeat.
        let mut fences: BTreeMap<u128, &Hold> = BTreeMap::new();
        for h in &of_key {
            if let Some(other) = fences.insert(h.fence, h) {
                let at = |h: &Hold| {
                    let since = |us: u64| (us as i64 - window.cut_at as i64) as f64 / 1000.0;
                    let side = if cut_off(h) { ", cut off" } else { "" };
                    if window.cut_at == u64::MAX {
                        String::new()
                    } else {
                        format!(" asked {:.1} ms, started {:.1} ms after the cut{side}", since(h.asked), since(h.start))
                    }
                };
                // Two live primaries each follow their own counter and
                // clock: one grant of the old primary and one of the new
                // may carry the same fence (the same microsecond). Inside
                // that window without replica acknowledgement, counted;
                // anywhere else a violation.
                let across = window.two_primaries(h, other).is_some();
                if across {
                    report.repeated_across += 1;
                }
                if !across || replica_acks > 0 {
                    report.violations.push(format!(
                        "{key}: fence {} granted twice ({}{} and {}{})",
                        h.fence,
                        other.worker,
                        at(other),
                        h.worker,
                        at(h)
                    ));
                }
            }
        }
        // Fences of sections one after the other grow, but across the two
        // primaries (each follows its own counter).
        for (i, a) in of_key.iter().enumerate() {
            for b in of_key[i + 1..].iter().filter(|b| b.start >= a.end && b.fence <= a.fence) {
                if window.two_primaries(a, b).is_none() {
                    report.violations.push(format!(
                        "{key}: fence {} ({}) granted after the section of fence {} ({}) ended",
                        b.fence, b.worker, a.fence, a.worker
                    ));
                }
            }
        }
        // A write the store refused was a stale holder's: a higher fence
        // began before its section ended (and that overlap is checked below),
        // or, inside the two primaries' window without replica
        // acknowledgement, its twin from the other primary (the same fence,
        // counted above) wrote first: a write the store accepted.
        let overtook = |b: &Hold, h: &Hold| {
            let twin = b.fence == h.fence && b.store == 'W' && replica_acks == 0 && window.two_primaries(h, b).is_some();
            b.start < h.end && (b.fence > h.fence || twin)
        };
        for h in of_key.iter().filter(|h| h.store == 'X' || h.store == 'R') {
            if !of_key.iter().any(|b| overtook(b, h)) {
                report.violations.push(format!(
                    "{key}: the store refused fence {} ({}) though no higher fence was granted before its section ended",
                    h.fence, h.worker
                ));
            }
        }
        // Overlaps, each explained or a violation.
        for (i, a) in of_key.iter().enumerate() {
            for b in of_key[i + 1..].iter().take_while(|b| b.start < a.end) {
                // The older holder is the stale one; an expired lease
                // explains the overlap only if it was told, and only if
                // its lease ran out before the other began: a lease from
                // its grant, placed by its fence (an acquire that waited
                // for the key was granted well after `asked`).
                let older = if a.fence < b.fence { a } else { b };
                let newer = if a.fence < b.fence { b } else { a };
                let cause = if let Some(window) = window.two_primaries(a, b) {
                    window
                } else if older.told() && newer.start >= window.granted(older) + u64::from(LEASE_MS) * 1000 {
                    "expired lease"
                } else {
                    "unexplained"
                };
                *report.overlaps.entry(cause).or_default() += 1;
                if cause == "unexplained" || (cause.contains("old primary") && replica_acks > 0) {
                    report.violations.push(format!(
                        "{key}: {} (fence {}) and {} (fence {}) overlapped {} us ({cause})",
                        a.worker,
                        a.fence,
                        b.worker,
                        b.fence,
                        a.end.min(b.end) - b.start
                    ));
                }
            }
        }
        // The store: accepted fences strictly grow; no increment lost.
        let mut last = 0;
        let mut accepted = 0;
        for attempt in &history.attempts {
            match *attempt {
                Attempt::Accepted(fence) => {
                    if fence <= last {
                        report.violations.push(format!("{key}: the store accepted fence {fence} after {last}"));
                    }
                    last = fence;
                    accepted += 1;
                }
                Attempt::Refused(_) => report.refused += 1,
                Attempt::Read(_) => {}
            }
        }
        report.accepted += accepted;
        if history.value != accepted {
            report.violations.push(format!("{key}: the store holds {} after {accepted} accepted increments", history.value));
        }
    }
}

/// The checks must be able to fail: feed them broken histories first.
fn self_test() {
    let hold = |worker: &str, fence: u128, start: u64, end: u64, release: &str| Hold {
        worker: worker.into(),
        key: "k0".into(),
        fence,
        start,
        end,
        store: 'W',
        release: release.into(),
        kind: log::HoldKind::Writer,
        asked: start,
        member: "-".into(),
    };
    // Cut at 100, the new primary promoted at 150, healed at 200, the old
    // primary demoted at 300; after the heal, it granted c1 the section
    // that starts at 210.
    let window = Window {
        cut_at: 100,
        promoted_at: 150,
        healed_at: 200,
        demoted_at: 300,
        fence_clock: FenceClock::default(),
        by_old: BTreeSet::from([("k0".to_string(), 210)]),
    };
    let store = |attempts: Vec<Attempt>| {
        let value = attempts.iter().filter(|a| matches!(a, Attempt::Accepted(_))).count() as u64;
        BTreeMap::from([("k0".to_string(), store::KeyHistory { value, refused: 0, attempts })])
    };
    let run = |holds: &[Hold], stores: &BTreeMap<String, store::KeyHistory>, acks: u32| {
        let mut report = Report::default();
        check_history(holds, stores, &window, acks, &mut report);
        report
    };
    let fine = store(vec![Attempt::Accepted(1), Attempt::Accepted(2)]);
    // The minority's client (c1) granted by the old primary while cut off,
    // overlapping a majority holder the new primary granted: the documented
    // window without replica acknowledgement, a violation with it.
    let split = [hold("c2", 160, 160, 190, "OK"), hold("c1", 120, 120, 170, "OK")];
    let report = run(&split, &fine, 0);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!((report.minority_grants, report.overlaps.get("partitioned old primary")), (1, Some(&1)));
    assert!(!run(&split, &fine, 1).violations.is_empty(), "a minority grant with replicaAcks");
    // Before the cut, an overlap is explained only by a told holder.
    // A grant is placed by its fence (the server's clock, here offset 0)
    // within what its client saw: asked before the cut and granted after
    // it is a grant while cut off; asked while cut off and granted after
    // the heal (by the new primary) is not.
    let asked = |mut h: Hold, asked: u64| {
        h.asked = asked;
        h
    };
    let across_cut = [asked(hold("c1", 110, 120, 130, "OK"), 90)];
    assert_eq!(run(&across_cut, &fine, 0).minority_grants, 1, "granted after the cut");
    assert!(!run(&across_cut, &fine, 1).violations.is_empty(), "a grant after the cut with replicaAcks");
    let before_cut = [asked(hold("c1", 95, 120, 130, "OK"), 90)];
    assert_eq!(run(&before_cut, &fine, 1).minority_grants, 0, "granted before the cut");
    let after_heal = [asked(hold("c1", 240, 250, 260, "OK"), 150)];
    let report = run(&after_heal, &fine, 1);
    assert_eq!((report.minority_grants, report.minority_after_heal), (0, 1), "granted after the heal");
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    let before = [hold("c2", 1, 10, 50, "OK"), hold("c3", 2, 20, 60, "OK")];
    assert!(!run(&before, &fine, 0).violations.is_empty(), "an unexplained overlap");
    // An expired lease: the older holder told, and the newer one began
    // after the older one's lease (from its call) ran out.
    let told = [hold("c2", 1, 10, 2_000_000, "LEASE_LOST"), hold("c3", 2, 1_500_000, 1_600_000, "OK")];
    assert!(run(&told, &fine, 0).violations.is_empty(), "a told holder's overlap");
    let early = [hold("c2", 1, 10, 50, "LEASE_LOST"), hold("c3", 2, 20, 60, "OK")];
    assert!(!run(&early, &fine, 0).violations.is_empty(), "told, but granted again before its lease could have ended");
    let newer_told = [hold("c2", 1, 10, 2_000_000, "OK"), hold("c3", 2, 1_500_000, 1_600_000, "LEASE_LOST")];
    assert!(!run(&newer_told, &fine, 0).violations.is_empty(), "the newer holder told, the stale one not");
    // Its acquire called at 10 but granted (by its fence) at 600,000, after
    // a wait: its lease ran to 1,600,000, past the newer one's start.
    let waited = [asked(hold("c2", 600_000, 600_010, 2_000_000, "LEASE_LOST"), 10), hold("c3", 1_200_000, 1_200_000, 1_300_000, "OK")];
    assert!(!run(&waited, &fine, 0).violations.is_empty(), "told, but granted again before its lease from its grant could have ended");
    // A double grant by the old primary itself: c1 while cut off, over a
    // holder it granted before the cut, or one granted before any promotion.
    let old_twice = [hold("c2", 90, 90, 140, "OK"), hold("c1", 120, 120, 130, "OK")];
    assert!(!run(&old_twice, &fine, 0).violations.is_empty(), "the old primary granted a key twice");
    let before_promotion = [hold("c1", 120, 120, 140, "OK"), hold("c2", 130, 130, 170, "OK")];
    assert!(!run(&before_promotion, &fine, 0).violations.is_empty(), "a majority grant before the promotion");
    // After the heal: excused only for a grant the old primary made.
    let by_old = [hold("c2", 205, 205, 230, "OK"), asked(hold("c1", 208, 210, 220, "OK"), 205)];
    let report = run(&by_old, &fine, 0);
    assert!(report.violations.is_empty(), "{:?}", report.violations);
    assert_eq!(report.overlaps.get("old primary after the heal, before its demotion"), Some(&1));
    assert!(!run(&by_old, &fine, 1).violations.is_empty(), "the old primary after the heal, with replicaAcks");
    let by_new = [hold("c2", 205, 205, 230, "OK"), asked(hold("c1", 208, 211, 220, "OK"), 205)];
    assert!(!run(&by_new, &fine, 0).violations.is_empty(), "after the heal, a double grant by the new primary");
    // Fences of sections one after another: lower only across the primaries.
    let backwards = [hold("c2", 5, 10, 20, "OK"), hold("c3", 4, 30, 40, "OK")];
    assert!(!run(&backwards, &fine, 0).violations.is_empty(), "a fence below an earlier section's");
    let across_lower = [asked(hold("c1", 180, 175, 178, "OK"), 170), hold("c2", 170, 179, 185, "OK")];
    let report = run(&across_lower, &fine, 0);
    assert!(report.violations.is_empty(), "a lower fence from the other primary: {:?}", report.violations);
    // A write the store refused: only from a holder a higher fence overtook.
    let refused = |mut h: Hold| {
        h.store = 'X';
        h
    };
    let no_cause = [refused(hold("c2", 5, 10, 20, "OK"))];
    assert!(!run(&no_cause, &fine, 0).violations.is_empty(), "a write refused with no higher fence granted");
    let overtaken = [refused(hold("c2", 1, 10, 2_000_000, "LEASE_LOST")), hold("c3", 2, 1_500_000, 1_600_000, "OK")];
    let report = run(&overtaken, &fine, 0);
    assert!(report.violations.is_empty(), "a stale holder's write refused: {:?}", report.violations);
    let twice = [hold("c2", 1, 10, 20, "OK"), hold("c3", 1, 30, 40, "OK")];
    assert!(!run(&twice, &fine, 0).violations.is_empty(), "a fence granted twice");
    // The same fence from the two sides of a partition (the old primary's
    // grant to c1 while cut off, the majority's to c2): the window, without
    // acknowledgement only.
    let across = [hold("c2", 160, 160, 170, "OK"), asked(hold("c1", 160, 165, 180, "OK"), 120)];
    let report = run(&across, &fine, 0);
    assert!(report.violations.iter().all(|v| !v.contains("twice")) && report.repeated_across == 1, "{:?}", report.violations);
    assert!(run(&across, &fine, 1).violations.iter().any(|v| v.contains("twice")), "a fence twice across the cut with acks");
    // Its twin wrote first, so the store refused c1's write of the same
    // fence: the same window explains the refusal. On one side it does not.
    let [c2, c1] = across.clone();
    let report = run(&[c2, refused(c1)], &fine, 0);
    assert!(report.violations.is_empty(), "a write refused after its twin from the other primary: {:?}", report.violations);
    let [c2, c1] = across.clone();
    assert!(run(&[c2, refused(c1)], &fine, 1).violations.iter().any(|v| v.contains("refused")), "refused after a twin, with acks");
    let [c2, c1] = across.clone();
    let report = run(&[refused(c2), refused(c1)], &fine, 0);
    assert_eq!(report.violations.iter().filter(|v| v.contains("refused")).count(), 2, "twins both refused: {:?}", report.violations);
    let twins = [hold("c2", 5, 10, 20, "OK"), refused(hold("c3", 5, 15, 30, "OK"))];
    assert!(run(&twins, &fine, 0).violations.iter().any(|v| v.contains("refused")), "refused after a twin on one side");
    let same_side = [hold("c1", 120, 118, 125, "OK"), hold("c1", 120, 126, 130, "OK")];
    assert!(run(&same_side, &fine, 0).violations.iter().any(|v| v.contains("twice")), "a fence twice on one side");
    let lower = store(vec![Attempt::Accepted(2), Attempt::Accepted(1)]);
    assert!(!run(&[], &lower, 0).violations.is_empty(), "the store accepted a lower fence");
    let mut lost = store(vec![Attempt::Accepted(1), Attempt::Accepted(2)]);
    lost.get_mut("k0").unwrap().value = 1;
    assert!(!run(&[], &lost, 0).violations.is_empty(), "a lost increment");
    // pg-failover: each server's own record of its holders.
    pg::self_test();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("worker") {
        worker::run(worker::WorkerArgs::parse(&args[1..]));
        return;
    }
    if args.first().map(String::as_str) == Some("wire") {
        wire::run(&args[1..]);
        return;
    }
    if args.first().map(String::as_str) == Some("monitor") {
        monitor::run(&args[1..]);
        return;
    }
    self_test();
    if let Some(seconds) = std::env::var("PARTITIONS_LONG_S").ok().and_then(|s| s.parse::<u64>().ok()) {
        long_form(Duration::from_secs(seconds));
        return;
    }
    let partition = Duration::from_secs(std::env::var("PARTITIONS_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(3));
    let names: Option<Vec<String>> = std::env::var("PARTITIONS_ONLY").ok().map(|o| o.split(',').map(|s| s.trim().to_owned()).collect());
    if let Some(names) = &names {
        let known: Vec<&str> = SCENARIOS
            .iter()
            .map(|s| s.name)
            .chain(pg::PG_SCENARIOS.iter().map(|s| s.name))
            .chain(mysql::MYSQL_SCENARIOS.iter().map(|s| s.name))
            .chain([CLOCK_SKEW])
            .collect();
        if let Some(unknown) = names.iter().find(|n| !known.contains(&n.as_str())) {
            eprintln!("partitions: PARTITIONS_ONLY names {unknown:?}, no scenario; the scenarios are: {}", known.join(", "));
            std::process::exit(2);
        }
    }
    let chosen = |name: &str| names.as_ref().is_none_or(|names| names.iter().any(|n| n == name));
    let scenarios: Vec<&Scenario> = SCENARIOS.iter().filter(|s| chosen(s.name)).collect();
    let pg_scenarios: Vec<&pg::PgScenario> = pg::PG_SCENARIOS.iter().filter(|s| chosen(s.name)).collect();
    let mysql_scenarios: Vec<&mysql::MysqlScenario> = mysql::MYSQL_SCENARIOS.iter().filter(|s| chosen(s.name)).collect();
    let clock_skew = chosen(CLOCK_SKEW);
    if clock_skew {
        let started = Instant::now();
        clock::a_primary_promoted_with_its_clock_behind_repeats_no_fence_within_fence_retention_and_is_reported_past_it();
        println!(
            "{CLOCK_SKEW}: a replica 30 s behind promoted; fences grew within fenceRetentionMs, went back past it, and both were reported ({} ms)",
            started.elapsed().as_millis()
        );
    }
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("partitions");
    let mut reports: Vec<Report> = scenarios.iter().map(|s| run_scenario(s, partition, &root)).collect();
    reports.extend(pg_scenarios.iter().map(|s| pg::run(s, partition, &root)));
    reports.extend(mysql_scenarios.iter().map(|s| mysql::run(s, partition, &root)));
    if let Some(why) = Net::netem_missing() {
        println!("partitions: `tc qdisc add ... netem` fails here ({why}): slow-network delays by a user-space wire (wire.rs)");
    }

    println!(
        "\npartitions: Sentinel (primary, 2 replicas, 3 sentinels) / Cluster (3 primaries, 3 replicas), a primary and 1 of 3 clients cut off for {} s after the promotion; lease {LEASE_MS} ms, {KEYS} keys (logs in {})",
        partition.as_secs(),
        root.display()
    );
    let mut violations = 0;
    for r in &reports {
        violations += r.violations.len();
        let overlaps: Vec<String> = r.overlaps.iter().map(|(cause, n)| format!("{n} {cause}")).collect();
        let failures: Vec<String> = r.failures.iter().map(|(what, n)| format!("{what} {n}")).collect();
        if r.custom {
            println!("{}: violations {}", r.name, r.violations.len());
            for note in &r.notes {
                println!("  {note}");
            }
            for v in &r.violations {
                eprintln!("VIOLATION [{}] {v}", r.name);
            }
            continue;
        }
        println!("{} (replicaAcks {}): violations {}", r.name, r.replica_acks, r.violations.len());
        if let Some((before, during)) = r.latency {
            println!(
                "  {}% of the packets lost each way on every client link for {} ms ({}); overlapping pairs: {}; store: {} writes accepted, {} refused; failed acquires: {}",
                r.loss,
                r.partition_ms,
                if r.delay_ms > 0 { format!("each frame held {} ms each way by a user-space wire", r.delay_ms) } else { "no delay".into() },
                if overlaps.is_empty() { "none".into() } else { overlaps.join(", ") },
                r.accepted,
                r.refused,
                if failures.is_empty() { "none".into() } else { failures.join(", ") }
            );
            for (when, l) in [("before", before), ("during", during)] {
                println!("  acquire to section {when}: {} grants, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms", l.grants, l.p50, l.p99, l.max);
            }
            for v in &r.violations {
                eprintln!("VIOLATION [{}] {v}", r.name);
            }
            continue;
        }
        println!(
            "  timeline: cut; a replica promoted {} ms after the cut; healed {} ms after the cut; the old primary a replica {} ms after the heal",
            r.promoted_ms,
            r.partition_ms,
            r.rejoined_ms.map_or("(never)".into(), |ms| ms.to_string())
        );
        println!(
            "  grants: {} in all; while cut off: minority {} ({} store writes accepted), majority {}; minority after the heal, before the demotion: {}",
            r.grants, r.minority_grants, r.minority_accepted, r.majority_grants, r.minority_after_heal
        );
        println!(
            "  overlapping pairs: {}; store: {} writes accepted, {} refused; fences granted by both primaries: {}; no fence granted twice otherwise: {}",
            if overlaps.is_empty() { "none".into() } else { overlaps.join(", ") },
            r.accepted,
            r.refused,
            r.repeated_across,
            !r.violations.iter().any(|v| v.contains("granted twice"))
        );
        println!(
            "  the minority's client first failed {}; failed acquires: {}",
            r.learned_ms.map_or("never during the run".into(), |ms| format!("{ms} ms after the cut")),
            if failures.is_empty() { "none".into() } else { failures.join(", ") }
        );
        for v in &r.violations {
            eprintln!("VIOLATION [{}] {v}", r.name);
        }
    }
    if violations > 0 {
        eprintln!("partitions: {violations} violations");
        std::process::exit(1);
    }
}

/// The long form (`PARTITIONS_LONG_S=<seconds>`): per topology (all four,
/// or those `PARTITIONS_ONLY` names: `sentinel`, `cluster`, `postgres`,
/// `mysql`),
/// cycle after cycle for that long, each a fresh deployment partitioned
/// and healed once (its scenarios in turn, with and without replica
/// acknowledgement; the partition 2 to 5 s after the promotion, by turns),
/// then the totals: cycles, grants, overlaps by cause, violations. A cycle
/// whose harness gave up (a bound not met) is counted as such, and fails
/// the run as a violation does.
fn long_form(each: Duration) {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("partitions-long");
    let topologies: Vec<(&str, Vec<&str>)> = vec![
        ("sentinel", vec!["sentinel-partition", "sentinel-partition-acks", "sentinel-one-way", "sentinel-one-way-acks"]),
        ("cluster", vec!["cluster-partition", "cluster-partition-acks"]),
        ("postgres", vec!["pg-commit-cut", "pg-failover", "pg-failover-sync"]),
        ("mysql", vec!["mysql-partition", "mysql-partition-semisync"]),
    ];
    let only: Option<Vec<String>> = std::env::var("PARTITIONS_ONLY").ok().map(|o| o.split(',').map(|s| s.trim().to_string()).collect());
    if let Some(names) = &only {
        if let Some(unknown) = names.iter().find(|n| !topologies.iter().any(|(t, _)| t == n)) {
            eprintln!(
                "partitions: in the long form PARTITIONS_ONLY names topologies (sentinel, cluster, postgres, mysql), not {unknown:?}"
            );
            std::process::exit(2);
        }
    }
    let mut failed = false;
    for (topology, names) in topologies.iter().filter(|(t, _)| only.as_ref().is_none_or(|o| o.iter().any(|n| n == t))) {
        let started = Instant::now();
        let mut cycles = 0u64;
        let mut per: BTreeMap<&str, u64> = BTreeMap::new();
        let mut gave_up: Vec<String> = Vec::new();
        let mut total = Report::default();
        let mut violations: Vec<String> = Vec::new();
        while started.elapsed() < each {
            let name = names[cycles as usize % names.len()];
            let partition = Duration::from_secs(2 + (cycles / names.len() as u64) % 4);
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match SCENARIOS.iter().find(|s| s.name == name) {
                Some(scenario) => run_scenario(scenario, partition, &root),
                None => match mysql::MYSQL_SCENARIOS.iter().find(|s| s.name == name) {
                    Some(scenario) => mysql::run(scenario, partition, &root),
                    None => pg::run(pg::PG_SCENARIOS.iter().find(|s| s.name == name).unwrap(), partition, &root),
                },
            }));
            cycles += 1;
            *per.entry(name).or_default() += 1;
            match run {
                Ok(r) if !r.violations.is_empty() || r.repeated_across > 0 => {
                    // Its logs, before the next cycle of the scenario overwrites them
                    // (also of a fence both primaries granted: pg.rs notes how).
                    for note in r.notes.iter().filter(|n| n.starts_with("the same fence")) {
                        eprintln!("[{name} cycle {cycles}] {note}");
                    }
                    let _ = std::process::Command::new("cp")
                        .arg("-a")
                        .arg(root.join(name))
                        .arg(root.join(format!("{name}-cycle{cycles}")))
                        .status();
                    violations.extend(r.violations.iter().map(|v| format!("[{name} cycle {cycles}] {v}")));
                    add(&mut total, &r);
                }
                Ok(r) => add(&mut total, &r),
                Err(panic) => {
                    let why = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                    gave_up.push(format!("[{name} cycle {cycles}] {}", why.unwrap_or_default()));
                }
            }
            eprintln!("[long {topology}] {cycles} cycles, {} s, {} violations so far", started.elapsed().as_secs(), violations.len());
        }
        let overlaps: Vec<String> = total.overlaps.iter().map(|(cause, n)| format!("{n} {cause}")).collect();
        println!(
            "\npartitions, long form, {topology}: {cycles} cycles of partition and heal in {} s ({}); grants {} (while cut off: minority {}, of which {} store writes accepted; majority {}); overlapping pairs: {}; store: {} accepted, {} refused; fences granted by both primaries {}; violations {}; cycles the harness gave up {}",
            started.elapsed().as_secs(),
            per.iter().map(|(n, c)| format!("{c} {n}")).collect::<Vec<_>>().join(", "),
            total.grants,
            total.minority_grants,
            total.minority_accepted,
            total.majority_grants,
            if overlaps.is_empty() { "none".into() } else { overlaps.join(", ") },
            total.accepted,
            total.refused,
            total.repeated_across,
            violations.len(),
            gave_up.len()
        );
        for v in violations.iter().chain(&gave_up) {
            eprintln!("VIOLATION {v}");
        }
        failed |= !violations.is_empty() || !gave_up.is_empty();
    }
    if failed {
        std::process::exit(1);
    }
}

/// Adds a cycle's figures to the long form's totals (overlaps also by
/// setting: with replica acknowledgement or synchronous replication, or
/// without).
fn add(total: &mut Report, r: &Report) {
    total.grants += r.grants;
    total.minority_grants += r.minority_grants;
    total.majority_grants += r.majority_grants;
    total.minority_accepted += r.minority_accepted;
    total.accepted += r.accepted;
    total.refused += r.refused;
    total.repeated_across += r.repeated_across;
    for (cause, n) in &r.overlaps {
        *total.overlaps.entry(cause).or_default() += n;
        *total.overlaps.entry(if r.replica_acks > 0 { "in cycles with acknowledgement" } else { "in cycles without" }).or_default() += n;
    }
}
