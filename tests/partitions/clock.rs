//! A replica whose clock runs 30 s behind is promoted (issue 39 §2,
//! "Clocks"; docs/guarantees.md's "Fences, under which assumption"): a primary on
//! this machine's clock, its replica a real `redis-server` under Debian's
//! libfaketime (`FAKETIME=-30s`, preloaded as `faketime -f -30s` does;
//! scripts/setup faults), and one sentinel that fails over to the replica
//! on `SENTINEL FAILOVER`.
//!
//! Within the bound (`fenceRetentionMs` of 10 minutes, above the skew) a
//! key's fences never repeat: its counter came across with the data (the
//! test waits until the replica has every write: a forced failover can
//! promote a replica that missed the last grants, and their keys' fences
//! then follow its clock at once) and every grant is above it. Past it
//! (`fenceRetentionMs: 1000`, far below the skew) the counter lapses,
//! before the promotion or a second after the promoted primary's grant,
//! and the next fence follows that primary's clock: 27-29 s below the
//! fences already handed out. Either way the driver says that the new
//! primary's clock is behind (a `clock-behind` telemetry event and a
//! `REDIS_CLOCK_BEHIND` log line naming the skew, never a key) as soon as
//! it grants a fence from its own clock.
//!
//! libfaketime cannot start a process that uses jemalloc, as Debian's
//! redis-server does (its clock calls recurse while libfaketime starts:
//! libfaketime's issue 130); the replica also preloads a small library
//! that hands `malloc` and its kin to glibc (compiled here), so that
//! jemalloc is not in the allocation path. The clock is libfaketime's.
//!
//! Part of the partition harness (scenario `clock-skew`, run first, about
//! 3 s) rather than a plain test: it needs `faketime`, which
//! `scripts/test-partitions` installs (scripts/setup faults), and the
//! quick loop's plain `cargo test` of the redis suites does not. Its
//! servers are on loopback, not in namespaces.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use dokebi_lock::log::{Level, LogRecord};
use dokebi_lock::telemetry::TelemetryEvent;
use dokebi_lock::{AcquireOptions, Hooks, Options, Provider};
use futures::executor::block_on;

/// How far behind the replica's clock runs.
const SKEW_S: u64 = 30;
/// Keys whose names must never appear in a log line.
const KEY_WITHIN: &str = "order-within-7f3a";
const KEY_FRESH: &str = "order-fresh-7f3a";
const KEY_PAST: &str = "order-past-7f3a";

/// `malloc` and its kin handed to glibc, ahead of the jemalloc that
/// redis-server links (see the top of this file).
const GLIBC_MALLOC: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { return __libc_malloc(n); }
void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
void *valloc(size_t n) { return __libc_memalign(4096, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  void *p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
size_t malloc_usable_size(void *p) {
  static size_t (*glibc)(void *);
  if (!glibc) glibc = (size_t (*)(void *))dlsym(dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD), "malloc_usable_size");
  return glibc(p);
}
"#;

/// The test's processes and directory, killed and removed on drop (also
/// when the test fails).
struct Deployment {
    dir: PathBuf,
    children: Vec<Child>,
    primary: u16,
    replica: u16,
    sentinel: u16,
}

impl Drop for Deployment {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).stderr(Stdio::null()).output().expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn until(what: &str, bound: Duration, mut ready: impl FnMut() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < bound, "{what}: not within {bound:?}");
        sleep(Duration::from_millis(50));
    }
}

/// The server's `TIME` in microseconds.
fn server_time_us(port: u16) -> u64 {
    let reply = cli(port, &["TIME"]);
    let mut fields = reply.lines().map(|l| l.trim().parse::<u64>().expect("TIME's fields"));
    fields.next().unwrap() * 1_000_000 + fields.next().unwrap()
}

impl Deployment {
    fn start() -> Deployment {
        let dir = std::env::temp_dir().join(format!("dokebi-clock-skew-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut deployment = Deployment { dir, children: Vec::new(), primary: free_port(), replica: free_port(), sentinel: free_port() };
        let dir = deployment.dir.clone();
        let shim = dir.join("glibc-malloc.so");
        std::fs::write(dir.join("glibc-malloc.c"), GLIBC_MALLOC).unwrap();
        let built = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&shim)
            .arg(dir.join("glibc-malloc.c"))
            .arg("-ldl")
            .status()
            .expect("cc (scripts/setup base)");
        assert!(built.success(), "cc could not build the malloc shim");

        let server = |port: u16, name: &str, extra: &[String]| -> Vec<String> {
            let data = dir.join(name);
            std::fs::create_dir_all(&data).unwrap();
            let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--dir"].map(String::from));
            args.push(data.display().to_string());
            args.extend(extra.iter().cloned());
            args
        };
        let log = |name: &str| std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let primary_args = server(deployment.primary, "primary", &[]);
        deployment.children.push(spawn(Command::new("redis-server").args(&primary_args), log("primary")));
        let replica_args =
            server(deployment.replica, "replica", &["--replicaof".into(), "127.0.0.1".into(), deployment.primary.to_string()]);
        // libfaketime preloaded as the `faketime` command does (which forks
        // and waits, so that killing it would leave the server running).
        let preload = format!("{} {}", shim.display(), libfaketime().display());
        let mut replica = Command::new("redis-server");
        replica.args(&replica_args).env("LD_PRELOAD", preload).env("FAKETIME", format!("-{SKEW_S}s"));
        deployment.children.push(spawn(&mut replica, log("replica")));
        until("the replica syncs", Duration::from_secs(20), || {
            cli(deployment.replica, &["INFO", "replication"]).contains("master_link_status:up")
        });

        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {}\nbind 127.0.0.1\ndir {}\nsentinel monitor mymaster 127.0.0.1 {} 1\n\
                 sentinel down-after-milliseconds mymaster 1000\nsentinel failover-timeout mymaster 2000\n",
                deployment.sentinel,
                dir.display(),
                deployment.primary
            ),
        )
        .unwrap();
        deployment.children.push(spawn(Command::new("redis-server").arg(&config).arg("--sentinel"), log("sentinel")));
        until("the sentinel knows the replica", Duration::from_secs(20), || {
            let master = cli(deployment.sentinel, &["SENTINEL", "MASTER", "mymaster"]);
            let lines: Vec<&str> = master.lines().collect();
            lines.iter().position(|l| *l == "num-slaves").and_then(|i| lines.get(i + 1)) == Some(&"1")
        });
        deployment
    }

    /// Returns once the replica has every write the primary made: a
    /// failover that lost the last grants would leave their keys without a
    /// counter on the new primary, whose fences then follow its clock at
    /// once, 30 s below (a run saw that: the other assumption of
    /// docs/guarantees.md, clocks agreeing within the time a failover takes).
    fn wait_replicated(&self) {
        let offset = |info: &str, field: &str| -> Option<u64> {
            let at = info.find(field)? + field.len();
            info[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        };
        until("the replica has every write", Duration::from_secs(10), || {
            let info = cli(self.primary, &["INFO", "replication"]);
            matches!((offset(&info, "master_repl_offset:"), offset(&info, ",offset=")), (Some(primary), Some(replica)) if replica >= primary)
        });
    }

    /// `SENTINEL FAILOVER`; returns once the sentinel names the replica, it
    /// says it is a primary and the old primary says it is a replica. Until
    /// then the old primary still grants (the driver moves on its first
    /// `READONLY`, or the sentinel's switch message): the sentinel demotes
    /// it at its next `INFO` of it, up to 10 s later; the test sends it the
    /// same `REPLICAOF` at once.
    fn fail_over(&self) {
        let started = Instant::now();
        until("the sentinel accepts the failover", Duration::from_secs(10), || {
            cli(self.sentinel, &["SENTINEL", "FAILOVER", "mymaster"]) == "OK"
        });
        until("the replica promoted", Duration::from_secs(20), || {
            cli(self.sentinel, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster"]).lines().nth(1) == Some(&*self.replica.to_string())
                && cli(self.replica, &["ROLE"]).lines().next() == Some("master")
        });
        assert_eq!(cli(self.primary, &["REPLICAOF", "127.0.0.1", &self.replica.to_string()]), "OK");
        eprintln!("clock skew: the replica 30 s behind promoted {} ms after SENTINEL FAILOVER", started.elapsed().as_millis());
    }
}

/// Debian's libfaketime (the package `faketime`, scripts/setup faults).
fn libfaketime() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketime.so.1"))
        .find(|lib| lib.exists());
    found.expect("libfaketime.so.1 under /usr/lib/<arch>/faketime: install faketime (scripts/setup faults)")
}

fn spawn(command: &mut Command, log: std::fs::File) -> Child {
    command
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("redis-server and faketime (scripts/setup faults)")
}

/// Takes and releases `key`, retrying while the driver follows the
/// failover; its fence.
fn fence_of(backend: &dokebi_lock::Backend, key: &str) -> u64 {
    let started = Instant::now();
    loop {
        match block_on(backend.acquire(key, AcquireOptions::default())) {
            Ok(lease) => {
                let fence = lease.fence();
                assert!(block_on(lease.release()).unwrap(), "released");
                return fence;
            }
            Err(err) => {
                assert!(started.elapsed() < Duration::from_secs(15), "{key}: no grant after the failover: {err}");
                sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The scenario `clock-skew`: panics on the first broken promise.
pub fn a_primary_promoted_with_its_clock_behind_repeats_no_fence_within_fence_retention_and_is_reported_past_it() {
    let deployment = Deployment::start();
    // The replica's clock really is behind (libfaketime on redis' TIME).
    let behind_us = server_time_us(deployment.primary) as i64 - server_time_us(deployment.replica) as i64;
    assert!(
        (SKEW_S as i64 - 2) * 1_000_000 < behind_us && behind_us < (SKEW_S as i64 + 2) * 1_000_000,
        "the replica is {behind_us} us behind"
    );

    let events: Arc<Mutex<Vec<TelemetryEvent>>> = Arc::default();
    let records: Arc<Mutex<Vec<LogRecord>>> = Arc::default();
    let hooks = {
        let (events, records) = (events.clone(), records.clone());
        Hooks {
            telemetry: Some(Arc::new(move |event: &TelemetryEvent| events.lock().unwrap().push(event.clone()))),
            logger: Arc::new(move |record: &LogRecord| records.lock().unwrap().push(record.clone())),
            ..Hooks::default()
        }
    };
    let sentinel = format!("sentinel: {{ nodes: ['redis://127.0.0.1:{}'], primaryName: mymaster }}", deployment.sentinel);
    let options = Options::from_yaml(&format!(
        "schemaVersion: 1
options:
  dokebi-redis:
    connections:
      within: {{ {sentinel} }}
      past: {{ {sentinel} }}
  dokebi-lock:
    backends:
      within: {{ driver: redis, connection: within, namespace: skew, leaseMs: 5000 }}
      past: {{ driver: redis, connection: past, namespace: skew, leaseMs: 5000, fenceRetentionMs: 1000 }}
"
    ))
    .unwrap();
    let provider = Provider::open_with(options, hooks).unwrap();
    let within = provider.backend("within").unwrap();
    let past = provider.backend("past").unwrap();

    let before_within: Vec<u64> = (0..3).map(|_| fence_of(&within, KEY_WITHIN)).collect();
    let before_past: Vec<u64> = (0..3).map(|_| fence_of(&past, KEY_PAST)).collect();
    assert!(events.lock().unwrap().iter().all(|e| e.name() != "clock-behind"), "nothing behind before the failover");

    // The past key's counter lapses on the old primary before the promotion
    // (1 s after its value, by the old primary's clock, which replicates the
    // deletion): a counter that came across instead now lives until the new
    // primary's clock passes its value (30 s here), and its fences would not
    // fall within the test.
    sleep(Duration::from_millis(1500));
    deployment.wait_replicated();
    deployment.fail_over();

    // Within the bound: the key's counter came across with the data and
    // outlives the skew, so every fence is above every earlier one.
    let after_within: Vec<u64> = (0..3).map(|_| fence_of(&within, KEY_WITHIN)).collect();
    let fences: Vec<u64> = before_within.iter().chain(&after_within).copied().collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "within fenceRetentionMs the fences grow: {fences:?}");
    // A key the new primary has no counter for gets a fence from its clock:
    // 30 s below the others. No fence of that key repeats (it had none),
    // and the driver says the clock is behind.
    let fresh = fence_of(&within, KEY_FRESH);
    let within_behind = after_within.last().unwrap() - fresh;
    assert!(
        fresh < before_within[0],
        "the fresh key's fence {fresh} follows the clock 30 s behind, below {before_within:?} {after_within:?}"
    );

    // Past the bound: the counter lived 1 s after its value and lapsed
    // before the promotion (above), so the new primary's fences follow its
    // clock: below the fences the key already had.
    let first = fence_of(&past, KEY_PAST);
    sleep(Duration::from_millis(1500));
    let lapsed = fence_of(&past, KEY_PAST);
    let highest_before = *before_past.last().unwrap();
    assert!(lapsed < before_past[0], "past fenceRetentionMs the fence {lapsed} went back below {before_past:?}");
    // The first fence that fell below the highest the connection had seen.
    let past_behind = if first < highest_before { highest_before - first } else { first - lapsed };
    eprintln!(
        "clock skew: past fenceRetentionMs the key's counter {} the promotion",
        if first < highest_before { "lapsed before" } else { "came across, and lapsed 1 s after" }
    );

    // Both connections said so, each once, naming the skew: how far the
    // fence fell below the highest one granted before (at least that far
    // behind: the highest was the old primary's clock when it was
    // granted, the time since is not counted).
    let reported: Vec<TelemetryEvent> = events.lock().unwrap().iter().filter(|e| e.name() == "clock-behind").cloned().collect();
    for (backend, retention, expected) in
        [("within", Duration::from_secs(600), within_behind), ("past", Duration::from_millis(1000), past_behind)]
    {
        let of_backend: Vec<&TelemetryEvent> =
            reported.iter().filter(|e| matches!(e, TelemetryEvent::ClockBehind { backend: b, .. } if b == backend)).collect();
        assert_eq!(of_backend.len(), 1, "one clock-behind event for {backend}: {reported:?}");
        let TelemetryEvent::ClockBehind { connection, behind, fence_retention, .. } = of_backend[0] else { unreachable!() };
        assert_eq!((connection.as_str(), *fence_retention), (backend, retention));
        assert_eq!(*behind, Duration::from_micros(expected), "{backend}: the fence's fall");
        assert!(*behind > Duration::from_secs(SKEW_S - 15) && *behind < Duration::from_secs(SKEW_S), "{backend}: {behind:?} of {SKEW_S} s");
    }
    let records = records.lock().unwrap();
    let lines: Vec<&LogRecord> = records.iter().filter(|r| r.code == "REDIS_CLOCK_BEHIND").collect();
    assert_eq!(lines.len(), 2, "one log line per connection: {lines:?}");
    for line in &lines {
        assert!(line.message.contains(" s behind"), "the line names the skew: {}", line.message);
        for key in [KEY_WITHIN, KEY_FRESH, KEY_PAST] {
            assert!(!line.message.contains(key), "no key in the line: {}", line.message);
        }
        let expected = if line.backend == "past" { Level::Error } else { Level::Warn };
        assert_eq!(line.level, expected, "{}: {}", line.backend, line.message);
        eprintln!("clock skew: {} {}: {}", line.level.as_str(), line.backend, line.message);
    }
    drop(records);
    block_on(provider.close());
}
