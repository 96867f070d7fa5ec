//! The model on the file driver, in one private lock directory (the
//! driver creates it `0700`): no server, so no injected faults; leases
//! never expire (the kernel holds the locks), so a lease says valid until
//! its release or close. Once every lease was released, the lock files of
//! free keys must be gone.

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

    /// A release that found another process holding a unit of its key
    /// leaves the key's files to the next release of the key (docs/file.md,
    /// "No lock file piles up"): each key is taken and released once.
    fn sweep(&self, providers: &[Arc<Provider>]) {
        let Some(provider) = providers.first() else { return };
        for backend in ["a", "b"] {
            let backend = provider.backend(backend).unwrap();
            let wait = || AcquireOptions { wait_timeout: Some(Duration::from_secs(5)), ..AcquireOptions::default() };
            for key in PLAIN_KEYS {
                let lease = block_on(backend.acquire(key, wait())).expect("the sweep's acquire");
                assert!(block_on(lease.release()).unwrap());
            }
            for key in COUNTED_KEYS {
                let counted = AcquireOptions { limit: Some(COUNTED_LIMIT), weight: Some(1), ..wait() };
                let lease = block_on(backend.acquire(key, counted)).expect("the sweep's counted acquire");
                assert!(block_on(lease.release()).unwrap());
            }
        }
    }

    fn residue(&self, recorder: &Recorder, after_retention: bool) {
        for entry in std::fs::read_dir(&self.dir).expect("the lock directory the backends made") {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            residue(recorder, format!("lock file {name:?}"), Some(0), after_retention);
        }
    }
}
