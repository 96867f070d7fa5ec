//! The model on a private PostgreSQL: its faults are an immediate restart
//! (`pg_ctl stop -m immediate`, then recovery from the WAL) and slow
//! commits (another session holds every key row of a table for a moment,
//! so takes, hand-overs and clean-ups wait on it). Once every lease was
//! released and the retention passed, and a few releases went by to clean
//! up, no row of a model key may be left in any table.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dokebi_lock::{AcquireOptions, Provider};
use futures::executor::block_on;

use crate::server::PrivateServer;

use super::history::{Location, Recorder};
use super::model::{residue, Difference, Spec, Store, Trigger, BASE, RETENTION_MS};
use super::rng::Rng;

pub struct PostgresModel {
    server: Mutex<PrivateServer>,
    url: String,
    last_restart: Mutex<Instant>,
}

const RESTART: &str = "immediate restart";
const SLOW: &str = "slow commit";
/// The key the sweep acquires and releases: the only one whose rows may stay.
const SWEEP_KEY: &str = "sweep";

impl PostgresModel {
    pub fn start() -> PostgresModel {
        let server = PrivateServer::start("model", &[]);
        let url = server.url();
        PostgresModel { server: Mutex::new(server), url, last_restart: Mutex::new(Instant::now()) }
    }

    /// The tables every backend of the model may write.
    fn tables() -> Vec<String> {
        [Difference::Namespace, Difference::Schema, Difference::Table]
            .iter()
            .map(|d| Spec::differing(*d))
            .chain([BASE])
            .map(|spec| format!("{}.{}", spec.schema, spec.table))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect()
    }

    /// Runs `sql` on a connection of its own; `None` when it failed (a
    /// table not created yet, the server restarting).
    fn query(&self, sql: &str) -> Option<Vec<tokio_postgres::SimpleQueryMessage>> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await.ok()?;
            tokio::spawn(connection);
            client.simple_query(sql).await.ok()
        })
    }

    fn restart(&self) -> bool {
        let mut last = self.last_restart.lock().unwrap();
        if last.elapsed() < Duration::from_secs(5) {
            return false;
        }
        let mut server = self.server.lock().unwrap();
        server.crash();
        server.start_again();
        *last = Instant::now();
        true
    }

    /// Holds every key row of one table for 50 to 400 ms.
    fn slow_commit(&self, rng: &mut Rng) -> bool {
        let tables = Self::tables();
        let table = &tables[rng.below(tables.len() as u64) as usize];
        let pause = rng.between(50, 400);
        self.query(&format!("BEGIN; SELECT 1 FROM {table} FOR UPDATE; SELECT pg_sleep({pause} / 1000.0); COMMIT")).is_some()
    }
}

impl Store for PostgresModel {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn differences(&self) -> &'static [Difference] {
        &[Difference::Namespace, Difference::LeaseMs, Difference::Schema, Difference::Table]
    }

    fn yaml(&self, a: &Spec, b: &Spec) -> String {
        let backend = |name: &str, spec: &Spec| {
            format!(
                "      {name}:\n        driver: postgres\n        connection: main\n        schema: {}\n        table: {}\n        namespace: {}\n        leaseMs: {}\n        fenceRetentionMs: {RETENTION_MS}\n",
                spec.schema, spec.table, spec.namespace, spec.lease_ms
            )
        };
        format!(
            "schemaVersion: 1\noptions:\n  dokebi-postgres:\n    connections:\n      main:\n        url: '{}'\n        commandTimeoutMs: 800\n        connectTimeoutMs: 2000\n  dokebi-lock:\n    backends:\n{}{}",
            self.url,
            backend("a", a),
            backend("b", b)
        )
    }

    fn location(&self, spec: &Spec) -> Location {
        format!("{}.{} namespace {}", spec.schema, spec.table, spec.namespace)
    }

    fn inject(&self, rng: &mut Rng, _recorder: &Recorder) -> &'static str {
        match rng.below(10) {
            0..=2 if self.restart() => RESTART,
            // Slow commits stall renews past the lease's end: only where
            // that is not known to break (see `KNOWN_OPEN`).
            3..=7 if Trigger::RenewNearExpiry.enabled() && self.slow_commit(rng) => SLOW,
            _ => "pause",
        }
    }

    fn faults(&self) -> Vec<&'static str> {
        if Trigger::RenewNearExpiry.enabled() {
            vec![RESTART, SLOW]
        } else {
            vec![RESTART]
        }
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
        for table in Self::tables() {
            for suffix in ["", "_holders", "_waiting"] {
                let sql = format!("SELECT namespace || '/' || key FROM {table}{suffix} WHERE key <> '{SWEEP_KEY}'");
                // A table no backend used does not exist.
                let Some(rows) = self.query(&sql) else { continue };
                for row in rows {
                    if let tokio_postgres::SimpleQueryMessage::Row(row) = row {
                        let name = format!("row {} of {table}{suffix}", row.get(0).unwrap_or_default());
                        residue(recorder, name, Some(0), after_retention);
                    }
                }
            }
        }
    }
}
