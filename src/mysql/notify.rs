//! Release wake-ups without `LISTEN`: one poller per `dokebi-mysql`
//! connection, on a connection of its own, reads the `<table>_released` log
//! of each table its backends use (see [`super::schema`]) every
//! millisecond, but only while an acquire of this process is in progress
//! on the connection, so an idle process sends nothing. An entry names a
//! freed key someone waited for, which with its table names the key's
//! queue (see [`super::store::queue_name`]), whose head it wakes.
//!
//! The log is read by id from a little below the highest id seen, skipping
//! ids seen already: a release whose id was taken before another's but
//! that committed after it is still found (if fewer than [`REREAD`] ids
//! came between). One found later, or never (the poller's connection
//! down), costs its waiter at most `notifyPollIntervalMs`, the safety-net
//! retry, or `pollIntervalMs` while the poller is down
//! (`status().mysql` then says so).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;

use super::store::{queue_name, Shared};

/// How often the log is read while acquires are in progress.
const EVERY: Duration = Duration::from_millis(1);

/// How often an idle poller looks whether an acquire started.
const IDLE: Duration = Duration::from_millis(2);

/// How far below the highest id seen each read starts.
const REREAD: i64 = 256;

/// The first and the longest wait before connecting the poller again.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// What the poller has read of one table's log.
struct Log {
    table: String,
    /// The highest id seen; `None` until the first read, which starts at
    /// the log's end.
    top: Option<i64>,
    /// The ids seen from `top - REREAD` on.
    seen: BTreeSet<i64>,
}

/// Keeps the poller alive until the connection shuts down.
pub(crate) async fn run(shared: Arc<Shared>, tables: Vec<String>) {
    let mut logs: Vec<Log> = tables.into_iter().map(|table| Log { table, top: None, seen: BTreeSet::new() }).collect();
    let mut retry = RETRY_MIN;
    while !shared.connection.is_shut_down() {
        let Ok(mut conn) = shared.connection.connect().await else {
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(RETRY_MAX);
            continue;
        };
        let bound = shared.connection.command_timeout();
        while !shared.connection.is_shut_down() {
            if shared.waiters.is_empty() {
                tokio::time::sleep(IDLE).await;
                continue;
            }
            let mut read = true;
            for log in &mut logs {
                match tokio::time::timeout(bound, poll(&mut conn, log)).await {
                    Ok(Ok(freed)) => freed.iter().for_each(|(ns, key)| shared.waiters.wake(&queue_name(&log.table, ns, key))),
                    // A table not created yet (no backend used it) is read
                    // once it is; the others go on.
                    Ok(Err(mysql_async::Error::Server(server))) if server.code == 1146 => {}
                    _ => read = false,
                }
            }
            if !read {
                break;
            }
            if !shared.connection.is_listening() {
                retry = RETRY_MIN;
                shared.connection.set_listening(true);
                // Releases may have happened while nobody read the log.
                shared.waiters.wake_all();
            }
            tokio::time::sleep(EVERY).await;
        }
        if shared.connection.is_listening() {
            shared.connection.set_listening(false);
            shared.waiters.wake_all();
        }
        drop(conn);
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
    shared.connection.set_listening(false);
}

/// Reads what `log` has not seen: the freed keys, each as its namespace
/// and key's stored names in hex.
async fn poll(conn: &mut mysql_async::Conn, log: &mut Log) -> Result<Vec<(String, String)>, mysql_async::Error> {
    let Some(top) = log.top else {
        let end: Option<i64> = conn.query_first(format!("SELECT COALESCE(MAX(id), 0) FROM `{}_released`", log.table)).await?;
        log.top = Some(end.unwrap_or(0));
        return Ok(Vec::new());
    };
    let low = top - REREAD;
    let rows: Vec<(i64, String, String)> = conn
        .query(format!("SELECT id, LOWER(HEX(ns)), LOWER(HEX(k)) FROM `{}_released` WHERE id > {low} ORDER BY id LIMIT 1024", log.table))
        .await?;
    let mut freed = BTreeMap::new();
    for (id, ns, key) in rows {
        if log.seen.insert(id) {
            freed.insert((ns, key), ());
        }
        log.top = Some(log.top.unwrap_or(0).max(id));
    }
    let floor = log.top.unwrap_or(0) - REREAD;
    log.seen = log.seen.split_off(&floor);
    Ok(freed.into_keys().collect())
}
