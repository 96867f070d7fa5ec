//! The model on the file driver, in one private lock directory (the
//! driver creates it `0700`): no server, so no injected faults; leases
//! never expire (the kernel holds the locks), so a lease says valid until
//! its release or close. Once every lease was released, the lock files of
//! free keys must be gone.

use std::path::PathBuf;

use super::history::{Location, Recorder};
use super::model::{residue, Difference, Spec, Store};
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

    fn residue(&self, recorder: &Recorder, after_retention: bool) {
        for entry in std::fs::read_dir(&self.dir).expect("the lock directory the backends made") {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            residue(recorder, format!("lock file {name:?}"), Some(0), after_retention);
        }
    }
}
