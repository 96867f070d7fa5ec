//! A policy that falls back from a database backend to the host: what the
//! tests of a refusal that must not move a key (a statement cut by the
//! server's time limit while it waited for a key's row) acquire through.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use dokebi_lock::{Backend, Lease, Provider};
use futures::executor::block_on;

use super::wait;

/// A policy `locks` over `db` and a file backend `host` (`minTier: host`,
/// `onUnavailable: fallBack`): an acquire `db` refuses as unavailable
/// (`PROVIDER_FAILED`) is served by `host`. The host's directory is the
/// test's own, removed on drop.
pub struct FallBackToHost {
    provider: Provider,
    directory: PathBuf,
}

impl FallBackToHost {
    /// `db` of `driver` (`postgres`, `mysql`) on `url`, with `fields` (its
    /// schema or table, its `leaseMs`), on a connection whose
    /// `commandTimeoutMs` is 2000.
    pub fn open(driver: &str, url: &str, fields: &str) -> FallBackToHost {
        FallBackToHost::open_with(driver, url, fields, 5000)
    }

    /// [`FallBackToHost::open`], passing `db` over for `cooldown_ms`
    /// (`reprobeCooldownMs`) once it could not serve.
    pub fn open_with(driver: &str, url: &str, fields: &str, cooldown_ms: u32) -> FallBackToHost {
        FallBackToHost::open_on(driver, &format!("url: '{url}', commandTimeoutMs: 2000"), fields, cooldown_ms)
    }

    /// [`FallBackToHost::open_with`] on a connection of its own fields
    /// (`connection`: its `url` and bounds, as YAML flow mapping entries).
    pub fn open_on(driver: &str, connection: &str, fields: &str, cooldown_ms: u32) -> FallBackToHost {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let next = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let directory = std::env::temp_dir().join(format!("dokebi-fall-back-host-{}-{next}", std::process::id()));
        let provider = Provider::from_yaml(&format!(
            "schemaVersion: 1\noptions:\n  dokebi-{driver}:\n    connections:\n      main: {{ {connection} }}\n  dokebi-lock:\n    backends:\n      db: {{ driver: {driver}, connection: main, {fields} }}\n      host: {{ driver: file, directory: '{}' }}\n      locks:\n        driver: policy\n        reprobeCooldownMs: {cooldown_ms}\n        default: {{ backends: [db, host], minTier: host, onUnavailable: fallBack }}\n",
            directory.display()
        ))
        .unwrap();
        FallBackToHost { provider, directory }
    }

    /// `db` on Redis at a port nothing answers on ([`unreachable_port`]:
    /// each connect ends after `connect_ms`, unreachable), passed over for
    /// `cooldown_ms` once it could not serve.
    pub fn over_unreachable(connect_ms: u64, cooldown_ms: u32) -> FallBackToHost {
        FallBackToHost::open_on(
            "redis",
            &format!("url: 'redis://127.0.0.1:{}', connectTimeoutMs: {connect_ms}, commandTimeoutMs: 1000", unreachable_port()),
            "namespace: test, leaseMs: 30000",
            cooldown_ms,
        )
    }

    /// `db` on Redis through `endpoint` (its `url:`, `sentinel:` or
    /// `cluster:` entry), answering within 2 s and connecting within
    /// 500 ms, leases of 30 s.
    pub fn on_redis(endpoint: &str) -> FallBackToHost {
        FallBackToHost::on_redis_with(endpoint, "commandTimeoutMs: 2000, connectTimeoutMs: 500")
    }

    /// `db` on Redis through `endpoint` with `timeouts` (more connection
    /// entries), leases of 30 s.
    pub fn on_redis_with(endpoint: &str, timeouts: &str) -> FallBackToHost {
        FallBackToHost::open_on("redis", &format!("{endpoint}, {timeouts}"), "namespace: test, leaseMs: 30000", 5000)
    }

    /// The provider.
    pub fn provider(&self) -> &Provider {
        &self.provider
    }

    /// The policy backend `locks`.
    pub fn locks(&self) -> Backend {
        self.provider.backend("locks").unwrap()
    }

    /// Acquires and releases a key of its own through the policy, served by
    /// `host` because `db` could not serve (unreachable): `db` is passed over
    /// for its cooldown from now on.
    pub fn find_db_unreachable(&self) {
        let first = block_on(self.locks().acquire("other", wait(5000))).unwrap();
        assert_eq!(first.served().unwrap().member.name, "host", "db is unreachable");
        assert!(block_on(first.release()).unwrap());
    }

    /// Acquires and releases `key`, served by `db`: the process learns the
    /// store (its connection; a cluster's slot map).
    pub fn warm(&self, key: &str) {
        let warm = block_on(self.locks().acquire(key, wait(0))).unwrap();
        assert_eq!(warm.served().unwrap().member.name, "db");
        assert!(block_on(warm.release()).unwrap());
    }

    /// [`FallBackToHost::acquire_held_within`] while `holder`'s `lease`
    /// holds `key` on `db`'s store; then, the acquire's panic kept for the
    /// end, `undo` (what the test did to the store), the policy closed, the
    /// lease released (it must still be held) and `holder` closed. Answers
    /// what the acquire ended with ([`FallBackToHost::acquire_held_within`]).
    pub fn never_served_from_host(self, holder: Provider, lease: Lease, key: &str, wait_ms: u64, why: &str, undo: impl FnOnce()) -> String {
        let started = std::time::Instant::now();
        let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.acquire_held_within(key, lease.fence(), wait_ms, why)));
        let elapsed = started.elapsed();
        undo();
        drop(self);
        let still_held = block_on(lease.release());
        eprintln!("the policy's acquire ended after {elapsed:?} ({served:?}); the holder's release: {still_held:?}");
        block_on(holder.close());
        let served = served.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        assert!(matches!(still_held, Ok(true)), "the holder's release: {still_held:?}");
        served
    }

    /// Acquires `key` (a single try) through the policy while another
    /// holder's lease (`fence`) holds it on `db`'s store: the acquire must
    /// not move to `host`, or the key is held on two members at once
    /// (`why`: what the store answered that the policy read as
    /// unavailable). Answers the member that served it, or the error's code.
    pub fn acquire_held(&self, key: &str, fence: u64, why: &str) -> String {
        self.acquire_held_within(key, fence, 0, why)
    }

    /// [`FallBackToHost::acquire_held`] with a wait of `wait_ms` (one that
    /// outlasts a connect: a wait of 0 ends while the member connects).
    pub fn acquire_held_within(&self, key: &str, fence: u64, wait_ms: u64, why: &str) -> String {
        let served = match block_on(self.provider.backend("locks").unwrap().acquire(key, wait(wait_ms))) {
            Ok(lease) => lease.served().map_or("?".to_owned(), |served| served.member.name.clone()),
            Err(err) => format!("{:?}", err.code()),
        };
        assert_ne!(served, "host", "{key} was held on db (fence {fence}) and the policy's acquire was served by host: {why}");
        served
    }
}

impl Drop for FallBackToHost {
    fn drop(&mut self) {
        block_on(self.provider.close());
        let _ = std::fs::remove_dir_all(&self.directory);
    }
}

/// A port of a listener that never accepts, its queue filled until a
/// connect timed out: a connect to it hangs with no socket up, as one to a
/// host that is down (a listener that takes connections and never answers
/// is a store that is up: `store::reach`). The listener and the queued
/// connections are kept for the rest of the process.
pub fn unreachable_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    while let Ok(stream) = TcpStream::connect_timeout(&address, Duration::from_millis(50)) {
        queued.push(stream);
        assert!(queued.len() < 10_000, "the listener's queue never filled");
    }
    std::mem::forget((listener, queued));
    address.port()
}
