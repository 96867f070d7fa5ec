//! Helpers of the mysql tests: the machine's MariaDB (127.0.0.1:3306, user
//! `root`, database `test`; `DOKEBI_MYSQL_URL` overrides), a table name of
//! its own per test (its tables and procedures dropped at the end), and
//! queries on a connection of their own.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};

use mysql_async::prelude::Queryable;

/// The server every test uses.
pub fn url() -> String {
    std::env::var("DOKEBI_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// The rows of `sql` (run on a connection of its own), each column as text.
pub fn rows(sql: &str) -> Vec<Vec<Option<String>>> {
    try_rows(sql).unwrap_or_else(|err| panic!("{sql}: {err}"))
}

/// [`rows`], or the server's error.
pub fn try_rows(sql: &str) -> Result<Vec<Vec<Option<String>>>, mysql_async::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url()).unwrap()).prefer_socket(false);
        let mut conn = mysql_async::Conn::new(opts).await?;
        let rows: Vec<mysql_async::Row> = conn.query(sql).await?;
        let _ = conn.disconnect().await;
        Ok(rows
            .into_iter()
            .map(|row| (0..row.len()).map(|at| row.get_opt::<Option<String>, _>(at).and_then(Result::ok).flatten()).collect())
            .collect())
    })
}

/// The one number `sql` answers.
pub fn count(sql: &str) -> i64 {
    rows(sql)[0][0].as_deref().unwrap_or("0").parse().unwrap()
}

/// A table name of the test's own: its tables and procedures are dropped
/// when it goes.
pub struct Table(pub String);

static TABLES: AtomicUsize = AtomicUsize::new(0);

impl Table {
    pub fn fresh() -> Table {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        Table(format!("t{}_{}_{nanos}", std::process::id(), TABLES.fetch_add(1, Ordering::Relaxed)))
    }

    /// A second name, for backends that differ in their table.
    pub fn named(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.0)
    }
}

impl Drop for Table {
    fn drop(&mut self) {
        drop_tables(&self.0);
        drop_tables(&self.named("b"));
    }
}

/// Drops the tables and procedures named after `table`.
pub fn drop_tables(table: &str) {
    let mut sql = String::new();
    for suffix in ["", "_holders", "_waiting", "_released"] {
        sql += &format!("DROP TABLE IF EXISTS `{table}{suffix}`;");
    }
    for suffix in
        ["_lock", "_held_against", "_try", "_release", "_take", "_renew", "_give_back", "_withdraw", "_hand_over", "_force_release"]
    {
        sql += &format!("DROP PROCEDURE IF EXISTS `{table}{suffix}`;");
    }
    let _ = try_rows(&sql);
}

/// The YAML of a provider with one mysql backend `shared` on `table`,
/// `fields` added to it.
pub fn yaml(table: &str, fields: &str) -> String {
    format!(
        "schemaVersion: 1\noptions:\n  dokebi-mysql:\n    connections:\n      main: {{ url: '{}', commandTimeoutMs: 2000 }}\n  dokebi-lock:\n    backends:\n      shared: {{ driver: mysql, connection: main, table: {table}, leaseMs: 5000{fields} }}\n",
        url()
    )
}

/// Holds the row lock of key `k` of `table` (namespace `dokebi-lock`) in an
/// open transaction of its own (another session's) until the returned
/// sender is dropped, then rolls it back.
pub fn hold_row(table: &str) -> std::sync::mpsc::Sender<()> {
    let exists = format!("SELECT COUNT(*) FROM `{table}` WHERE ns = 'dokebi-lock' AND k = 'k'");
    assert_eq!(count(&exists), 1, "the key's row exists");
    let lock = format!("START TRANSACTION; SELECT fence FROM `{table}` WHERE ns = 'dokebi-lock' AND k = 'k' FOR UPDATE");
    hold(url(), lock, "ROLLBACK")
}

/// [`hold_row`] for `ms`, from another thread: join it to wait for the end.
pub fn hold_row_for(table: &str, ms: u64) -> std::thread::JoinHandle<()> {
    let held = hold_row(table);
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(ms));
        drop(held);
    })
}

/// Runs `lock` on a connection of its own to `url` and keeps the locks it
/// took until the returned sender is dropped, then runs `unlock`.
pub fn hold(url: String, lock: String, unlock: &'static str) -> std::sync::mpsc::Sender<()> {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let (locked, is_locked) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let opts = mysql_async::OptsBuilder::from_opts(mysql_async::Opts::from_url(&url).unwrap()).prefer_socket(false);
            let mut conn = mysql_async::Conn::new(opts).await.unwrap();
            conn.query_drop(lock).await.unwrap();
            locked.send(()).unwrap();
            let _ = tokio::task::spawn_blocking(move || stopped.recv()).await;
            conn.query_drop(unlock).await.unwrap();
        });
    });
    is_locked.recv().expect("the locks are taken");
    stop
}
