//! The model on the file driver, in one private lock directory (the
//! driver creates it `0700`): no server, so no injected faults; leases
//! never expire (the kernel holds the locks), so a lease says valid until
//! its release or close. Once every lease was released, and one more
//! release of each key passed by, the lock files of free keys must be gone.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;

use super::history::{Location, Recorder};
use super::model::{residue, Difference, Spec, Store, COUNTED_KEYS, COUNTED_LIMIT, PLAIN_KEYS};
use super::rng::Rng;

pub struct FileModel {
    dir: PathBuf,
}

impl FileModel {
    pub fn start() -> FileModel {
        let dir = std::env::temp_dir().join(format!("dokebi-file-model-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        FileModel { dir }
    }
}

impl Drop for FileModel {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Store for FileModel {
    fn name(&self) -> &'static str {
        "file"
    }

    fn differences(&self) -> &'static [Difference] {
        &[Difference::Namespace]
    }

    fn yaml(&self, a: &Spec, b: &Spec) -> String {
        let backend = |name: &str, spec: &Spec| {
            format!("      {name}: {{ driver: file, directory: '{}', namespace: {} }}\n", self.dir.display(), spec.namespace)
        };
        format!("schemaVersion: 1\noptions:\n  dokebi-lock:\n    backends:\n{}{}", backend("a", a), backend("b", b))
    }

    fn location(&self, spec: &Spec) -> Location {
        format!("namespace {}", spec.namespace)
    }

    fn inject(&self, _rng: &mut Rng, _recorder: &Recorder) -> &'static str {
        "pause"
    }

    fn faults(&self) -> Vec<&'static str> {
        Vec::new()
    }

    fn sweep(&self, providers: &[Arc<Provider>]) {
        // A key whose release could not tell it free (another process's
        // take or release held its lock file at each of its tries, as on
        // a loaded machine) keeps its files for the next release of the
        // key (docs/file.md): one release of every key, in each namespace.
        let wait = |limit| AcquireOptions { wait_timeout: Some(Duration::from_secs(5)), limit, ..AcquireOptions::default() };
        let keys = PLAIN_KEYS.iter().map(|key| (*key, None)).chain(COUNTED_KEYS.iter().map(|key| (*key, Some(COUNTED_LIMIT))));
        let backends: Vec<_> = providers.iter().flat_map(|provider| ["a", "b"].map(|name| provider.backend(name).unwrap())).collect();
        for (key, limit) in keys {
            for backend in &backends {
                let lease = block_on(backend.acquire(key, wait(limit))).expect("the sweep's acquire");
                assert!(block_on(lease.release()).unwrap());
            }
        }
    }

    fn residue(&self, recorder: &Recorder, after_retention: bool) {
        for entry in std::fs::read_dir(&self.dir).expect("the lock directory the backends made") {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            // The directory's fence floor stays on purpose: the counters of
            // the lock files removed (src/file/floor.rs).
            if name == "floor.lock" {
                continue;
            }
            residue(recorder, format!("lock file {name:?}"), Some(0), after_retention);
        }
    }
}
