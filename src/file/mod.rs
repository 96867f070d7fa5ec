//! The `file` driver: locks shared by the processes of one host through
//! kernel locks on files of one directory; no server.
//!
//! - `name`: a key's lock file name, a digest (never the key).
//! - `directory`: the checked directory (private, on a local file system);
//!   `lock_file`: one open lock file (no symlinks, ours, locked without
//!   blocking); `sys`: what they ask of the system, with a Unix half
//!   (`flock`) and a Windows half (`LockFileEx`).
//! - `fence`: `max(counter + 1, clock_us)`, the counter in the lock file;
//!   `raise`: the lock under which readers holding a key together raise it;
//!   `floor`: the directory's record of the counters of removed lock files,
//!   above which a new lock file grants (fences do not go back with the
//!   clock).
//! - `take`: one key's kernel locks for one grant, by kind (exclusive,
//!   shared, counted units), and their release; `idle`: lock files of free
//!   keys kept open a moment for reuse.
//! - `core`: this process's queues (the local driver's engine), then the
//!   kernel locks of every key of a grant, all or none; releases;
//!   `watch`: cross-process wake-ups (inotify, polling as the safety net;
//!   polling alone where there is no inotify: macOS, the BSDs, Windows).
//! - [`backend`] and [`lease`]: the public API.
//!
//! ```no_run
//! # futures::executor::block_on(async {
//! use dokebi_lock::{AcquireOptions, Provider};
//!
//! let provider = Provider::from_yaml(
//!     "schemaVersion: 1
//! options:
//!   dokebi-lock:
//!     backends:
//!       jobs: { driver: file, directory: /var/lib/my-app/locks }
//! ",
//! )?;
//! let lease = provider.backend("jobs")?.acquire("nightly-report", AcquireOptions::default()).await?;
//! // critical section: another process of this host acquiring the key waits
//! lease.release().await?;
//! provider.close().await;
//! # Ok::<(), dokebi_lock::LockError>(())
//! # }).unwrap();
//! ```

pub mod backend;
pub(crate) mod core;
pub(crate) mod directory;
pub(crate) mod fence;
pub(crate) mod floor;
pub(crate) mod holders;
pub(crate) mod idle;
mod inspect;
pub mod lease;
pub(crate) mod lock_file;
pub(crate) mod name;
pub(crate) mod raise;
pub(crate) mod sys;
pub(crate) mod take;
pub(crate) mod watch;

pub use backend::FileBackend;
pub use lease::FileLease;
