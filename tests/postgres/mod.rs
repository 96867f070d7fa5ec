//! Helpers of the postgres tests: the machine's PostgreSQL (127.0.0.1:5432,
//! user `postgres`, database `test`; `DOKEBI_PG_URL` overrides), a schema
//! of its own per test (dropped at the end), and the YAML of a backend.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dokebi_lock::{AcquireOptions, Backend, ErrorCode, LockError, Provider, StoreCounts};
use tokio_postgres::{NoTls, Row};

/// The server every test uses.
pub fn url() -> String {
    std::env::var("DOKEBI_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Runs `sql` (simple protocol, several statements allowed) on a
/// connection of its own; the rows of the last statement are not kept.
pub fn batch(sql: &str) {
    batch_on(&url(), sql)
}

/// [`batch`] on the server at `url`.
pub fn batch_on(url: &str, sql: &str) {
    try_batch_on(url, sql).unwrap_or_else(|err| panic!("{sql}: {err}"))
}

/// [`batch_on`], or the server's error (a refused connect's too).
pub fn try_batch_on(url: &str, sql: &str) -> Result<(), tokio_postgres::Error> {
    runtime().block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await?;
        tokio::spawn(connection);
        client.batch_execute(sql).await
    })
}

/// The rows of one statement without parameters.
pub fn rows(sql: &str) -> Vec<Row> {
    rows_on(&url(), sql)
}

/// [`rows`] on the server at `url`.
pub fn rows_on(url: &str, sql: &str) -> Vec<Row> {
    runtime().block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("the test server is up");
        tokio::spawn(connection);
        client.query(sql, &[]).await.unwrap()
    })
}

/// The one number `sql` answers.
pub fn count(sql: &str) -> i64 {
    count_on(&url(), sql)
}

/// [`count`] on the server at `url`.
pub fn count_on(url: &str, sql: &str) -> i64 {
    rows_on(url, sql)[0].get(0)
}

/// A session of its own on the server at `url`, kept open (a transaction
/// or a lock held across the test's steps), driven by `runtime`.
pub fn session_on(runtime: &tokio::runtime::Runtime, url: &str) -> tokio_postgres::Client {
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("the test server is up");
        tokio::spawn(connection);
        client
    })
}

/// True when the server (or pooler) at `url` answers a query now.
pub fn answers(url: &str) -> bool {
    runtime().block_on(async {
        let Ok((client, connection)) = tokio_postgres::connect(url, NoTls).await else { return false };
        tokio::spawn(connection);
        client.simple_query("SELECT 1").await.is_ok()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Ends every server session named `application` (`application_name`), as
/// an administrator, a pooler or a failover does; answers how many there were.
pub fn terminate_sessions(application: &str) -> i64 {
    terminate_sessions_on(&url(), application)
}

/// [`terminate_sessions`] on the server at `url`.
pub fn terminate_sessions_on(url: &str, application: &str) -> i64 {
    count_on(url, &format!("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '{application}'"))
}

/// A schema of the test's own, dropped (with everything in it) on drop.
pub struct Schema(pub String);

impl Schema {
    pub fn fresh() -> Schema {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("dl_test_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        batch(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
        Schema(name)
    }

    /// `"<schema>".dokebi_lock<suffix>`.
    pub fn table(&self, suffix: &str) -> String {
        format!("{}.dokebi_lock{suffix}", self.0)
    }

    /// The YAML of one postgres backend `shared` in this schema, with extra
    /// backend and connection lines (each `name: value`, indented by the caller).
    pub fn yaml(&self, backend: &str, connection: &str) -> String {
        yaml_on(&url(), &self.0, backend, connection)
    }

    pub fn open(&self, backend: &str) -> Provider {
        Provider::from_yaml(&self.yaml(backend, "")).unwrap()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            batch(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0));
        }
    }
}

/// The YAML of one postgres backend `shared` on `url` (`leaseMs` 10000
/// unless `backend` gives one).
pub fn yaml_on(url: &str, schema: &str, backend: &str, connection: &str) -> String {
    let lease = if backend.contains("leaseMs:") {
        ""
    } else {
        "        leaseMs: 10000
"
    };
    format!(
        "schemaVersion: 1
options:
  dokebi-postgres:
    connections:
      main:
        url: '{url}'
        commandTimeoutMs: 2000
{connection}  dokebi-lock:
    backends:
      shared:
        driver: postgres
        connection: main
        schema: {schema}
{lease}{backend}"
    )
}

pub fn backend(provider: &Provider) -> Backend {
    provider.backend("shared").unwrap()
}

/// Acquire options that wait at most `ms`.
pub fn wait(ms: u64) -> AcquireOptions {
    AcquireOptions { wait_timeout: Some(Duration::from_millis(ms)), ..AcquireOptions::default() }
}

pub fn code<T: std::fmt::Debug>(result: Result<T, LockError>) -> ErrorCode {
    result.unwrap_err().code()
}

/// The lock layer's counts of a postgres backend.
pub fn counts(backend: &Backend) -> StoreCounts {
    match backend {
        Backend::Postgres(postgres) => postgres.counts(),
        _ => panic!("not a postgres backend"),
    }
}

/// Polls `condition` for up to 10 s.
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("timed out waiting until {what}");
}

/// `script`, a transaction that locks rows and then sleeps in `pg_sleep`,
/// run by `psql` in the background, as another application's session
/// holding those rows; answers once the session sleeps, its locks taken.
pub fn hold_in_background(script: &str) -> std::process::Child {
    let child = std::process::Command::new("psql")
        .arg(url())
        .args(["-q", "-c", script])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("psql runs");
    let sleeping =
        format!("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query = '{}'", script.replace('\'', "''"));
    eventually("the background session holds its rows", || count(&sleeping) == 1);
    child
}

/// Ends the `pg_sleep` of a [`hold_in_background`] session running
/// `script` (cancelled: its transaction ends and lets its rows go), for a
/// test that holds the rows until the waits it needs were seen rather than
/// for a fixed time a loaded host may not keep up with.
pub fn end_background(script: &str) {
    let sleeping = format!(
        "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND query = '{}'",
        script.replace('\'', "''")
    );
    drop(rows(&sleeping));
}
