//! The model on a private PostgreSQL: its faults are an immediate restart
//! (`pg_ctl stop -m immediate`, then recovery from the WAL; at most one in
//! 8 s) and slow commits (for a while, every write of a holder row sleeps
//! before its statement ends, the row locked). Once every lease was
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
        if last.elapsed() < Duration::from_secs(8) {
            return false;
        }
        let mut server = self.server.lock().unwrap();
        server.crash();
        server.start_again();
        *last = Instant::now();
        true
    }

    /// Slows every write of the holders rows of every table for 0.5 to 2 s:
    /// a trigger after each row's insert or update sleeps up to 0.1 s
    /// before the statement (and so the commit) ends, with the row locked;
    /// up to 0.3 s, so that a renew may commit after its lease's end, only
    /// where that is not known to break (see `KNOWN_OPEN`).
    fn slow_commits(&self, rng: &mut Rng) -> bool {
        let most = if Trigger::RenewNearExpiry.enabled() { 0.3 } else { 0.1 };
        let mut sql = format!(
            "CREATE OR REPLACE FUNCTION public.model_slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(random() * {most}); RETURN NULL; END $$;"
        );
        let holders: Vec<String> = Self::tables().iter().map(|table| format!("{table}_holders")).collect();
        // A table no backend used does not exist: each one on its own.
        let slowed: Vec<&String> = holders
            .iter()
            .filter(|table| {
                let create = format!("{sql} CREATE OR REPLACE TRIGGER model_slow AFTER INSERT OR UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION public.model_slow()");
                self.query(&create).is_some()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.between(500, 2000)));
        sql.clear();
        for table in &slowed {
            sql += &format!("DROP TRIGGER IF EXISTS model_slow ON {table};");
        }
        // After a restart meanwhile, again until it is gone.
        while !slowed.is_empty() && self.query(&sql).is_none() {
            std::thread::sleep(Duration::from_millis(200));
        }
        !slowed.is_empty()
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
            3..=6 if self.slow_commits(rng) => SLOW,
            _ => "pause",
        }
    }

    fn faults(&self) -> Vec<&'static str> {
        vec![RESTART, SLOW]
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
