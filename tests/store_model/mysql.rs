//! The model on the machine's MariaDB, in tables of the run's own (the
//! server is shared, so it is not restarted): its faults are killed
//! connections (every connection running a call of the run's procedures,
//! or a statement on its tables, is ended with `KILL`, as an administrator
//! or a failover does, the answer lost: at most one in 3 s) and slow
//! commits (for a while, every write of a holder row sleeps up to 0.1 s
//! before its statement ends, the row locked). Once every lease was
//! released and the retention passed, and a few releases went by to clean
//! up, no row of a model key may be left in any table.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;

use crate::mysql::{drop_tables, try_rows, url};

use super::history::{Location, Recorder};
use super::model::{residue, Difference, Spec, Store, BASE, RETENTION_MS};
use super::rng::Rng;

pub struct MysqlModel {
    /// What every table name of the run starts with.
    prefix: String,
    last_kill: Mutex<Instant>,
}

const KILL: &str = "killed connection";
const SLOW: &str = "slow commit";
/// The key the sweep acquires and releases: the only one whose rows may stay.
const SWEEP_KEY: &str = "sweep";

impl MysqlModel {
    pub fn start() -> MysqlModel {
        MysqlModel { prefix: format!("m{}", std::process::id()), last_kill: Mutex::new(Instant::now()) }
    }

    fn table(&self, spec: &Spec) -> String {
        format!("{}_{}", self.prefix, spec.table)
    }

    /// The tables every backend of the model may write.
    fn tables(&self) -> Vec<String> {
        let mut tables: Vec<String> = [Spec::differing(Difference::Table), BASE].iter().map(|spec| self.table(spec)).collect();
        tables.dedup();
        tables
    }

    /// Ends every connection running a call of the run's procedures.
    fn kill(&self) -> bool {
        let mut last = self.last_kill.lock().unwrap();
        if last.elapsed() < Duration::from_secs(3) {
            return false;
        }
        // A call lasts about a millisecond: looked for until one is caught,
        // by its `CALL` or (inside the procedure) the statement it runs.
        let sql =
            format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%`{}\\_%' AND ID <> CONNECTION_ID()", self.prefix);
        let looking = Instant::now();
        while looking.elapsed() < Duration::from_secs(2) {
            let Ok(ids) = try_rows(&sql) else { continue };
            let kills: String = ids.iter().filter_map(|row| row[0].as_ref()).map(|id| format!("KILL {id};")).collect();
            if !kills.is_empty() {
                // A connection may have ended meanwhile.
                let _ = try_rows(&kills);
                *last = Instant::now();
                return true;
            }
        }
        false
    }

    /// Slows every write of the holders rows of every table for 0.5 to 2 s.
    fn slow_commits(&self, rng: &mut Rng) -> bool {
        let mut slowed = Vec::new();
        for table in self.tables() {
            for (name, event) in [("model_slow_i", "INSERT"), ("model_slow_u", "UPDATE")] {
                let trigger = format!("`{table}_{name}`");
                let create = format!("CREATE TRIGGER {trigger} AFTER {event} ON `{table}_holders` FOR EACH ROW DO SLEEP(RAND() * 0.1)");
                // A table no backend used yet does not exist.
                if try_rows(&create).is_ok() {
                    slowed.push(trigger);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(rng.between(500, 2000)));
        for trigger in &slowed {
            while try_rows(&format!("DROP TRIGGER IF EXISTS {trigger}")).is_err() {
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        !slowed.is_empty()
    }
}

impl Drop for MysqlModel {
    fn drop(&mut self) {
        for table in self.tables() {
            drop_tables(&table);
        }
    }
}

impl Store for MysqlModel {
    fn name(&self) -> &'static str {
        "mysql"
    }

    /// No schemas: the tables live in the URL's database.
    fn differences(&self) -> &'static [Difference] {
        &[Difference::Namespace, Difference::LeaseMs, Difference::Table]
    }

    fn yaml(&self, a: &Spec, b: &Spec) -> String {
        let backend = |name: &str, spec: &Spec| {
            format!(
                "      {name}:\n        driver: mysql\n        connection: main\n        table: {}\n        namespace: {}\n        leaseMs: {}\n        fenceRetentionMs: {RETENTION_MS}\n",
                self.table(spec),
                spec.namespace,
                spec.lease_ms
            )
        };
        format!(
            "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main:\n        url: '{}'\n        commandTimeoutMs: 800\n        connectTimeoutMs: 2000\n  dokebi-lock:\n    backends:\n{}{}",
            url(),
            backend("a", a),
            backend("b", b)
        )
    }

    fn location(&self, spec: &Spec) -> Location {
        format!("{} namespace {}", self.table(spec), spec.namespace)
    }

    fn inject(&self, rng: &mut Rng, _recorder: &Recorder) -> &'static str {
        match rng.below(10) {
            0..=3 if self.kill() => KILL,
            4..=6 if self.slow_commits(rng) => SLOW,
            _ => "pause",
        }
    }

    fn faults(&self) -> Vec<&'static str> {
        vec![KILL, SLOW]
    }

    fn sweep(&self, providers: &[Arc<Provider>]) {
        // Each release cleans up to four key rows whose retention passed.
        for provider in providers {
            for backend in ["a", "b"] {
                let backend = provider.backend(backend).unwrap();
                for _ in 0..6 {
                    let options = AcquireOptions { wait_timeout: Some(Duration::from_secs(5)), ..AcquireOptions::default() };
                    let lease = block_on(backend.acquire(SWEEP_KEY, options)).expect("the sweep's acquire");
                    assert!(block_on(lease.release()).unwrap());
                }
            }
        }
    }

    fn residue(&self, recorder: &Recorder, after_retention: bool) {
        for table in self.tables() {
            for suffix in ["", "_holders", "_waiting"] {
                let sql = format!("SELECT CONCAT(ns, '/', k) FROM `{table}{suffix}` WHERE k <> '{SWEEP_KEY}'");
                // A table no backend used does not exist.
                let Ok(rows) = try_rows(&sql) else { continue };
                for row in rows {
                    let name = format!("row {} of {table}{suffix}", row[0].clone().unwrap_or_default());
                    residue(recorder, name, Some(0), after_retention);
                }
            }
        }
    }
}
