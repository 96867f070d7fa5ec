//! A policy that falls back from a database backend to the host: what the
//! tests of a refusal that must not move a key (a statement cut by the
//! server's time limit while it waited for a key's row) acquire through.

use std::path::PathBuf;

use dokebi_lock::{Backend, Provider};
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

    /// The policy backend `locks`.
    pub fn locks(&self) -> Backend {
        self.provider.backend("locks").unwrap()
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
