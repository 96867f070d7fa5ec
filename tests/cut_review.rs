//! Review of work/h2 (an acquire's wait, abort, close or dropped future
//! cuts a try short while it is in its first connect): a storm of acquires
//! against a real server behind a proxy that cuts every connection every
//! few tens of milliseconds, so that tries keep reconnecting and interrupts
//! keep landing around the moment a try's connect ends and its command is
//! sent. Checked: never two holders of an exclusive key (nor more than
//! `limit` units of a counted one), never a fence given twice, and once
//! the storm ends (clean-ups given time) both keys free: a try cut after
//! its command reached the server would leave a grant nobody holds (or
//! knows to clean up) until `leaseMs`.

mod support;

mod mysql;
#[path = "postgres/mod.rs"]
mod postgres;
#[path = "faults/proxy.rs"]
mod proxy;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dokebi_lock::{AbortController, AcquireOptions, Backend, Provider};
use proxy::Proxy;
use support::redis_server::RedisServer;

/// A small xorshift: no dependency, a different sequence per worker.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// What the storm saw.
#[derive(Default)]
struct Seen {
    violations: Vec<String>,
    outcomes: BTreeMap<String, usize>,
    fences: BTreeMap<&'static str, Vec<u64>>,
}

/// How a worker ends its acquire early, if at all.
enum Ending {
    Wait,
    Abort(u64),
    Drop(u64),
}

fn options(key: &str, wait_ms: u64) -> AcquireOptions {
    let mut options = AcquireOptions { wait_timeout: Some(Duration::from_millis(wait_ms)), ..AcquireOptions::default() };
    if key == "c" {
        options.limit = Some(2);
    }
    options
}

/// Runs workers on keys `x` (exclusive) and `c` (limit 2) of `backend`
/// for `length`, while `cutter` cuts the connections.
fn storm(backend: Backend, length: Duration, cutter: impl Fn() + Send + 'static) -> Seen {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let holders: Arc<[AtomicUsize; 2]> = Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]);
    let cutting = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
            while !stop.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(30 + rng.below(200)));
                if std::env::var_os("CUT_REVIEW_NO_CUTS").is_none() {
                    cutter();
                }
            }
        })
    };
    // `CUT_REVIEW_ENDINGS`: which endings the workers draw from (0 the
    // wait, 1 an abort, 2 a dropped future), all by default.
    let endings: Vec<u64> =
        std::env::var("CUT_REVIEW_ENDINGS").unwrap_or_else(|_| "012".to_owned()).bytes().map(|b| u64::from(b - b'0')).collect();
    let workers: Vec<_> = (0..12u64)
        .map(|n| {
            let (backend, seen, stop, holders, endings) = (backend.clone(), seen.clone(), stop.clone(), holders.clone(), endings.clone());
            thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ ((n + 1) * 0x1000_0001));
                let (key, slot, most): (&'static str, usize, usize) = if n % 2 == 0 { ("x", 0, 1) } else { ("c", 1, 2) };
                while !stop.load(Ordering::Relaxed) {
                    let wait_ms = rng.below(80);
                    let ending = match endings[rng.below(endings.len() as u64) as usize] {
                        0 => Ending::Wait,
                        1 => Ending::Abort(rng.below(60)),
                        _ => Ending::Drop(rng.below(60)),
                    };
                    let mut options = options(key, wait_ms);
                    let controller = AbortController::new();
                    options.signal = Some(controller.signal());
                    let outcome = runtime.block_on(async {
                        let acquire = backend.acquire(key, options);
                        match ending {
                            Ending::Wait => Some(acquire.await),
                            Ending::Abort(after) => {
                                let abort = async {
                                    tokio::time::sleep(Duration::from_millis(after)).await;
                                    controller.abort();
                                    std::future::pending::<()>().await
                                };
                                tokio::select! {
                                    outcome = acquire => Some(outcome),
                                    _ = abort => unreachable!(),
                                }
                            }
                            Ending::Drop(after) => tokio::time::timeout(Duration::from_millis(after), acquire).await.ok(),
                        }
                    });
                    let label = match &outcome {
                        None => "dropped".to_owned(),
                        Some(Ok(_)) => "granted".to_owned(),
                        Some(Err(err)) if err.message().contains("could not be reached within waitTimeoutMs") => {
                            "cut by the wait".to_owned()
                        }
                        Some(Err(err)) => {
                            let mut message: String = err.message().chars().take(90).collect();
                            if err.code() == dokebi_lock::ErrorCode::ProviderFailed {
                                use std::error::Error;
                                let cause = err.source().map(|cause| format!("{cause:?}")).unwrap_or_default();
                                message.push_str(&format!(" <{}>", cause.chars().take(160).collect::<String>()));
                            }
                            format!("{:?} {message}", err.code())
                        }
                    };
                    let record = |what: String| *seen.lock().unwrap().outcomes.entry(format!("{key}: {what}")).or_default() += 1;
                    record(label);
                    let Some(Ok(lease)) = outcome else { continue };
                    let now = holders[slot].fetch_add(1, Ordering::SeqCst) + 1;
                    if now > most {
                        seen.lock().unwrap().violations.push(format!("{now} holders of {key} at once (fence {})", lease.fence()));
                    }
                    seen.lock().unwrap().fences.entry(key).or_default().push(lease.fence());
                    thread::sleep(Duration::from_millis(1 + rng.below(3)));
                    holders[slot].fetch_sub(1, Ordering::SeqCst);
                    if let Err(err) = runtime.block_on(lease.release()) {
                        record(format!("release {:?}", err.code()));
                    }
                }
            })
        })
        .collect();
    thread::sleep(length);
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    cutting.join().unwrap();
    let mut seen = Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap();
    let mut fences = seen.fences.get("x").cloned().unwrap_or_default();
    fences.sort_unstable();
    let given = fences.len();
    fences.dedup();
    if fences.len() != given {
        seen.violations.push(format!("{} fences of x given twice", given - fences.len()));
    }
    seen
}

/// After the storm (its clean-ups given `settle`): both keys free, seen by
/// a provider straight on the server. A grant left by a try reported as
/// "nothing done" stays until `leaseMs` (30 s here). For a key still held,
/// `dump` tells what the store holds, and how long it stayed held is timed.
fn keys_free(direct: &Provider, settle: Duration, dump: impl Fn() -> String) -> Vec<String> {
    let ended = Instant::now();
    thread::sleep(settle);
    let backend = direct.backend("shared").unwrap();
    let free = |key: &str| {
        let mut options = options(key, 0);
        if key == "c" {
            options.weight = Some(2);
        }
        match futures::executor::block_on(backend.acquire(key, options)) {
            Ok(lease) => {
                futures::executor::block_on(lease.release()).unwrap();
                None
            }
            Err(err) => Some(err),
        }
    };
    let mut left = Vec::new();
    for key in ["x", "c"] {
        if let Some(err) = free(key) {
            let state = dump();
            let mut freed = None;
            while ended.elapsed() < Duration::from_secs(40) {
                thread::sleep(Duration::from_millis(250));
                if free(key).is_none() {
                    freed = Some(ended.elapsed());
                    break;
                }
            }
            left.push(format!("{key} still held {settle:?} after the storm ({err}); free after {freed:?}; the store held:\n{state}"));
        }
    }
    left
}

/// Every key of namespace `test` on `server`, with its type, value and TTL.
fn redis_dump(server: &RedisServer) -> String {
    let mut client = server.client();
    let mut out = String::new();
    for key in server.keys() {
        let kind: String = redis::cmd("TYPE").arg(&key).query(&mut client).unwrap();
        let value: redis::Value = match kind.as_str() {
            "string" => redis::cmd("GET").arg(&key).query(&mut client).unwrap(),
            "hash" => redis::cmd("HGETALL").arg(&key).query(&mut client).unwrap(),
            "zset" => redis::cmd("ZRANGE").arg(&key).arg(0).arg(-1).arg("WITHSCORES").query(&mut client).unwrap(),
            "set" => redis::cmd("SMEMBERS").arg(&key).query(&mut client).unwrap(),
            "list" => redis::cmd("LRANGE").arg(&key).arg(0).arg(-1).query(&mut client).unwrap(),
            _ => redis::Value::Nil,
        };
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut client).unwrap();
        out.push_str(&format!("  {key} ({kind}, pttl {ttl}): {value:?}\n"));
    }
    out
}

fn report(store: &str, seen: &Seen, left: &[String]) {
    eprintln!("{store} storm outcomes: {:?}", seen.outcomes);
    eprintln!("{store} fences given: x {}, c {}", seen.fences.get("x").map_or(0, Vec::len), seen.fences.get("c").map_or(0, Vec::len));
    let problems: Vec<&String> = seen.violations.iter().chain(left).collect();
    assert!(problems.is_empty(), "{store}: {problems:#?}");
}

/// Fails on work/h2 and on 665039a alike, on the counted key only: one
/// unit of `c` stays taken by a token nobody holds until `leaseMs` ends
/// (6 runs in 7 on work/h2 with cuts and aborts or dropped futures, 1 in 1
/// on 665039a; passed without cuts, and with waits only; `x` never).
/// Open, pre-existing, not the cut of a connect. The cause, as far as a
/// trial shows: a release's hand-over (`BackendCore::delete_if_ours`) whose
/// first attempt was lost and retried delivers `answered: true` to waiters
/// the retry did not grant, though the first attempt may have granted
/// them; one that then gives up is not `dirty`, and nothing gives its unit
/// back. Delivering `answered: handed.freed.first_attempt_lost.is_none()`
/// there (a trial, not committed) passed 5 runs in 5.
#[test]
fn redis_tries_cut_while_connecting_keep_one_holder_and_leave_no_grant() {
    let server = RedisServer::start();
    let proxy = Arc::new(Proxy::start(server.port(), latency()));
    let connection = [("connectTimeoutMs", "2000"), ("commandTimeoutMs", "2000")];
    let (stormed, _) = support::open_redis(&proxy.url(), &[("leaseMs", "30000")], &connection);
    let (direct, _) = support::open_redis(&server.url(), &[("leaseMs", "30000")], &connection);
    let started = Instant::now();
    let seen = {
        let proxy = proxy.clone();
        storm(stormed.backend("shared").unwrap(), storm_length(), move || proxy.cut())
    };
    let left = keys_free(&direct, Duration::from_secs(4), || redis_dump(&server));
    eprintln!("redis storm took {:?}", started.elapsed());
    report("redis", &seen, &left);
    futures::executor::block_on(stormed.close());
    futures::executor::block_on(direct.close());
}

/// Passes on work/h2 (11 runs of 5 to 15 s) and 665039a (3 runs).
#[test]
#[ignore = "long form of the storm above, on PostgreSQL (about 20 s): run with --ignored"]
fn postgres_tries_cut_while_connecting_keep_one_holder_and_leave_no_grant() {
    let upstream: u16 = postgres::url().rsplit(':').next().and_then(|tail| tail.split('/').next()).and_then(|p| p.parse().ok()).unwrap();
    let proxy = Arc::new(Proxy::start(upstream, latency()));
    let schema = postgres::Schema::fresh();
    let through = format!("postgres://postgres@127.0.0.1:{}/test?sslmode=disable", proxy.port());
    let connection = format!("        connectTimeoutMs: 2000\n        poolSize: 3\n        listenUrl: '{}'\n", postgres::url());
    let stormed = Provider::from_yaml(&postgres::yaml_on(&through, &schema.0, "        leaseMs: 30000\n", &connection)).unwrap();
    let direct = Provider::from_yaml(&postgres::yaml_on(&postgres::url(), &schema.0, "        leaseMs: 30000\n", "")).unwrap();
    // The tables first, so the storm's tries are the lock's statements.
    let warm = futures::executor::block_on(direct.backend("shared").unwrap().acquire("warm", options("warm", 0))).unwrap();
    futures::executor::block_on(warm.release()).unwrap();
    let seen = {
        let proxy = proxy.clone();
        storm(stormed.backend("shared").unwrap(), storm_length(), move || proxy.cut())
    };
    let table = schema.table("");
    let left = keys_free(&direct, Duration::from_secs(4), || format!("{:?}", postgres::rows(&format!("SELECT * FROM {table}"))));
    report("postgres", &seen, &left);
    futures::executor::block_on(stormed.close());
    futures::executor::block_on(direct.close());
}

/// The storm on MariaDB, where a waiting acquire's try lost under its
/// statement is given back by its token and tried again within the wait.
#[test]
#[ignore = "long form of the storm above, on MySQL (about 20 s): run with --ignored"]
fn mysql_tries_cut_while_connecting_keep_one_holder_and_leave_no_grant() {
    let upstream: u16 = mysql::url().rsplit(':').next().and_then(|tail| tail.split('/').next()).and_then(|p| p.parse().ok()).unwrap();
    let proxy = Arc::new(Proxy::start(upstream, latency()));
    let table = mysql::Table::fresh();
    let config = mysql::yaml(&table.0, "")
        .replace("leaseMs: 5000", "leaseMs: 30000")
        .replace("commandTimeoutMs: 2000", "commandTimeoutMs: 2000, connectTimeoutMs: 2000");
    let stormed = Provider::from_yaml(&config.replace(&mysql::url(), &format!("mysql://root@127.0.0.1:{}/test", proxy.port()))).unwrap();
    let direct = Provider::from_yaml(&config).unwrap();
    // The tables first, so the storm's tries are the lock's statements.
    let warm = futures::executor::block_on(direct.backend("shared").unwrap().acquire("warm", options("warm", 0))).unwrap();
    futures::executor::block_on(warm.release()).unwrap();
    let seen = {
        let proxy = proxy.clone();
        storm(stormed.backend("shared").unwrap(), storm_length(), move || proxy.cut())
    };
    let holders = format!("SELECT * FROM `{}_holders`", table.0);
    let left = keys_free(&direct, Duration::from_secs(4), || format!("{:?}", mysql::rows(&holders)));
    report("mysql", &seen, &left);
    futures::executor::block_on(stormed.close());
    futures::executor::block_on(direct.close());
}

/// `CUT_REVIEW_SECS` (default 20).
fn storm_length() -> Duration {
    Duration::from_secs(std::env::var("CUT_REVIEW_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(20))
}

/// `CUT_REVIEW_LATENCY_MS` (default 2): the proxy's delay each way; a longer
/// one makes a connect (several round trips) a longer target for a cut.
fn latency() -> Duration {
    Duration::from_millis(std::env::var("CUT_REVIEW_LATENCY_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(2))
}
