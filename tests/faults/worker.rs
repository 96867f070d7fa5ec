//! The Rust worker: the faults test binary run again as `faults worker ...`
//! (the C worker, `worker.c`, does the same through liblock). It loops until
//! its time is up: acquire one of the keys, read-modify-write the fenced
//! store, release, and log the hold (see [`crate::log`] for the lines).
//!
//! With a `limit` (the mixed scenarios), the sections are of mixed kinds
//! (see [`pick`]): the last key is counted with that limit, taken
//! with a weight of 1 or 2; the others are taken shared by readers (who
//! only read the store) or exclusive by writers.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, ErrorCode, LockError, LockMode, Provider};

use crate::log::{mono_us, HoldKind, PLACED};

/// The environment variable that hands every worker its options (YAML).
pub const YAML_VAR: &str = "FAULTS_LOCK_YAML";
/// The store's host for the Rust worker, when not 127.0.0.1 (the partition
/// harness runs its workers in network namespaces of their own).
pub const STORE_HOST_VAR: &str = "FAULTS_STORE_HOST";
/// A file whose appearance ends the Rust worker's run early (the partition
/// harness ends its runs when a scenario's timeline is over).
pub const STOP_FILE_VAR: &str = "FAULTS_STOP_FILE";

/// Everything a worker is told on its command line (the C and Node workers
/// take the same arguments in the same order); its options come in
/// [`YAML_VAR`].
pub struct WorkerArgs {
    pub store_port: u16,
    pub keys: u32,
    pub hold_ms: u32,
    pub run_ms: u32,
    pub log: String,
    pub seed: u64,
    pub read_sha: String,
    pub write_sha: String,
    pub shared_read_sha: String,
    /// 0: every section a writer (plain exclusive acquires, as before the
    /// lock kinds). Above: mixed kinds, the last key counted with this limit.
    pub limit: u32,
}

impl WorkerArgs {
    pub fn to_args(&self) -> Vec<String> {
        vec![
            self.store_port.to_string(),
            self.keys.to_string(),
            self.hold_ms.to_string(),
            self.run_ms.to_string(),
            self.log.clone(),
            self.seed.to_string(),
            self.read_sha.clone(),
            self.write_sha.clone(),
            self.shared_read_sha.clone(),
            self.limit.to_string(),
        ]
    }

    pub fn parse(args: &[String]) -> WorkerArgs {
        assert_eq!(args.len(), 10, "worker arguments: see WorkerArgs");
        WorkerArgs {
            store_port: args[0].parse().unwrap(),
            keys: args[1].parse().unwrap(),
            hold_ms: args[2].parse().unwrap(),
            run_ms: args[3].parse().unwrap(),
            log: args[4].clone(),
            seed: args[5].parse().unwrap(),
            read_sha: args[6].clone(),
            write_sha: args[7].clone(),
            shared_read_sha: args[8].clone(),
            limit: args[9].parse().unwrap(),
        }
    }
}

/// The options of every worker: the backend `faults` (and, under a policy,
/// its members), each a name and its fields (`name: value, ...`), and the
/// drivers' own options `driver`
/// (YAML lines under `options:`, e.g. its connection: `url:
/// "redis://..."`, `sentinel: { nodes: [...], primaryName: ... }`,
/// `cluster: { nodes: [...] }` or a postgres URL; none for the file driver).
/// The C and Node workers take the same YAML (in [`YAML_VAR`]), so the lock
/// reaches every worker the same way.
pub fn yaml(backends: &[(&str, String)], driver: &str) -> String {
    let backends: String = backends.iter().map(|(name, fields)| format!("      {name}: {{ {fields} }}\n")).collect();
    format!("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n{backends}{driver}")
}

/// A small xorshift generator: the worker needs no quality, only variety.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % u64::from(n.max(1))) as u32
    }
}

/// The next section's key and kind. The C and Node workers draw the same
/// way: a key out of `keys`; in a mixed run, the last key is counted (a
/// weight of 1 or 2 of `limit`), and of the other keys' sections two in
/// three are readers.
fn pick(rng: &mut Rng, keys: u32, limit: u32) -> (u32, HoldKind) {
    let key = rng.below(keys);
    let kind = if limit == 0 {
        HoldKind::Writer
    } else if key == keys - 1 {
        HoldKind::Counted { limit, weight: 1 + rng.below(2) }
    } else if rng.below(3) != 0 {
        HoldKind::Reader
    } else {
        HoldKind::Writer
    };
    (key, kind)
}

/// The code a failed acquire is logged with ([`PLACED`] for a policy's
/// refusal of a key its process had on the member that could not serve).
fn failure_code(error: &LockError) -> &'static str {
    let tried = error.details().and_then(|details| details["tried"].as_array());
    if error.code() == ErrorCode::NoEligibleBackend && tried.is_some_and(|tried| tried.iter().any(|t| t["code"] == "LOCK_BUSY")) {
        PLACED
    } else {
        error.code().as_str()
    }
}

pub fn run(args: WorkerArgs) {
    let provider = Provider::from_yaml(&std::env::var(YAML_VAR).expect("the worker's options")).expect("worker options");
    let backend = provider.backend("faults").unwrap();
    let mut store =
        redis::Client::open(format!("redis://{}:{}/0", std::env::var(STORE_HOST_VAR).as_deref().unwrap_or("127.0.0.1"), args.store_port))
            .unwrap()
            .get_connection()
            .expect("the store is up");
    let mut log = OpenOptions::new().create(true).append(true).open(&args.log).unwrap();
    let mut line = |text: String| log.write_all(text.as_bytes()).expect("log line");
    let mut rng = Rng(args.seed | 1);
    let end = Instant::now() + Duration::from_millis(args.run_ms.into());

    let stop = std::env::var_os(STOP_FILE_VAR).map(std::path::PathBuf::from);
    while Instant::now() < end && !stop.as_ref().is_some_and(|stop| stop.exists()) {
        let (key, kind) = pick(&mut rng, args.keys, args.limit);
        let key = format!("k{key}");
        let options = match kind {
            HoldKind::Writer => AcquireOptions::default(),
            HoldKind::Reader => AcquireOptions { mode: LockMode::Shared, ..AcquireOptions::default() },
            HoldKind::Counted { limit, weight } => AcquireOptions { limit: Some(limit), weight: Some(weight), ..AcquireOptions::default() },
        };
        let asked = mono_us();
        let lease = match futures::executor::block_on(backend.acquire(&key, options)) {
            Ok(lease) => lease,
            Err(err) => {
                line(format!("F {} {} {key}\n", failure_code(&err), mono_us()));
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        let fence = lease.fence();
        let start = mono_us();
        let token = kind.token();
        // Which policy member served the lease, asked again at its end: it must not have moved.
        let member = |lease: &dokebi_lock::Lease| lease.served().map_or("-".to_owned(), |served| served.member.name.clone());
        line(format!("A {key} {fence} {start} {token} {asked} {}\n", member(&lease)));
        let read: i64 = match kind {
            HoldKind::Writer => redis::cmd("EVALSHA").arg(&args.read_sha).arg(1).arg(format!("store:{key}")).arg(fence).query(&mut store),
            HoldKind::Reader => redis::cmd("EVALSHA")
                .arg(&args.shared_read_sha)
                .arg(2)
                .arg(format!("store:{key}"))
                .arg(format!("attempts:{key}"))
                .arg(fence)
                .query(&mut store),
            HoldKind::Counted { .. } => Ok(0),
        }
        .expect("store read");
        std::thread::sleep(Duration::from_millis(rng.below(args.hold_ms + 1).into()));
        let outcome = if read < 0 {
            "R"
        } else if kind == HoldKind::Reader {
            "S"
        } else if kind != HoldKind::Writer {
            "-"
        } else {
            let written: i64 = redis::cmd("EVALSHA")
                .arg(&args.write_sha)
                .arg(2)
                .arg(format!("store:{key}"))
                .arg(format!("attempts:{key}"))
                .arg(fence)
                .arg(read + 1)
                .query(&mut store)
                .expect("store write");
            if written == 1 {
                "W"
            } else {
                "X"
            }
        };
        let end_us = mono_us();
        line(format!("Q {end_us}\n"));
        let served = member(&lease);
        let released = match futures::executor::block_on(lease.release()) {
            Ok(true) => "OK",
            Ok(false) => "FALSE",
            Err(err) => err.code().as_str(),
        };
        line(format!("E {key} {fence} {start} {end_us} {outcome} {released} {token} {asked} {served}\n"));
    }
    futures::executor::block_on(provider.close());
}
