//! Release wake-ups without `LISTEN`: one poller per `dokebi-mysql`
//! connection, on a connection of its own, reads the `<table>_released` log
//! of each table its backends use (see [`super::schema`]) every
//! millisecond, but only while an acquire of this process is in progress
//! on the connection, so an idle process sends nothing. An entry names a
//! freed key someone waited for, which with its table names the key's
//! queue (see [`super::store::queue_name`]), whose head it wakes.
//!
//! The log is read by id from above the highest id seen, or from below the
//! oldest gap under it: an id skipped is a release that took its id before
//! another's and has not committed yet (or rolled back), so it is looked
//! for again for [`GAP_KEPT`]. One found later, or never (the poller's
//! connection down), costs its waiter at most `notifyPollIntervalMs`, the
//! safety-net retry, or `pollIntervalMs` while the poller is down
//! (`status().mysql` then says so).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use super::store::{queue_name, Shared};
use crate::store::StoreConnection;

/// How often the log is read while acquires are in progress.
const EVERY: Duration = Duration::from_millis(1);

/// How often an idle poller looks whether an acquire started.
const IDLE: Duration = Duration::from_millis(2);

/// How long an id skipped in the log is looked for again.
const GAP_KEPT: Duration = Duration::from_secs(1);

/// The most skipped ids looked for at once (the oldest go first).
const GAPS_KEPT: usize = 256;

/// The first and the longest wait before connecting the poller again.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// What the poller has read of one table's log.
struct Log {
    table: String,
    /// The highest id seen; `None` until the first read, which starts at
    /// the log's end.
    top: Option<i64>,
    /// The ids under `top` not seen yet, and when each was skipped.
    gaps: BTreeMap<i64, Instant>,
}

/// Keeps the poller alive until the connection shuts down.
pub(crate) async fn run(shared: Arc<Shared>, tables: Vec<String>) {
    let mut logs: Vec<Log> = tables.into_iter().map(|table| Log { table, top: None, gaps: BTreeMap::new() }).collect();
    let mut retry = RETRY_MIN;
    while !shared.connection.is_shut_down() {
        let Ok(mut conn) = own_session(&shared).await else {
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
            if !shared.connection.health().is_listening() {
                retry = RETRY_MIN;
                shared.connection.health().set_listening(true);
                // Releases may have happened while nobody read the log.
                shared.waiters.wake_all();
            }
            pause(EVERY).await;
        }
        if shared.connection.health().is_listening() {
            shared.connection.health().set_listening(false);
            shared.waiters.wake_all();
        }
        drop(conn);
        tokio::time::sleep(retry).await;
        retry = (retry * 2).min(RETRY_MAX);
    }
    shared.connection.health().set_listening(false);
}

/// Waits `every`, to the microsecond. This is not `tokio::time::sleep`:
/// tokio's timer counts whole milliseconds and rounds a deadline up to its
/// next tick, so that a 1 ms sleep lasted 1 to 2 ms, and with the read the
/// log was read every 2.1 ms here (about 480 reads a second, half what this
/// module says), which a hand-off waited for half of on average. A thread
/// of the runtime's blocking pool sleeps instead (one per polling
/// connection, kept while it polls).
async fn pause(every: Duration) {
    // A pause that could not start (the runtime shutting down) is over.
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(every)).await;
}

/// The poller's connection, its reads made independent of the server's
/// defaults: with `autocommit` off the first read would open a transaction
/// that never ends (each later read sees its snapshot, so no release is
/// ever found; under `SERIALIZABLE` its share locks on the log's end make
/// every release that logs wait and fail). Session state on this
/// connection only: the pool's never carry a `SET`.
async fn own_session(shared: &Shared) -> Result<mysql_async::Conn, ()> {
    let mut conn = shared.connection.connect().await.map_err(drop)?;
    let set = async {
        conn.query_drop("SET SESSION autocommit = 1").await?;
        conn.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await
    };
    match tokio::time::timeout(shared.connection.command_timeout(), set).await {
        Ok(Ok(())) => Ok(conn),
        _ => Err(()),
    }
}

/// Reads what `log` has not seen: the freed keys, each as its namespace
/// and key's stored names in hex.
async fn poll(conn: &mut mysql_async::Conn, log: &mut Log) -> Result<Vec<(String, String)>, mysql_async::Error> {
    let Some(top) = log.top else {
        let end: Option<i64> = conn.query_first(format!("SELECT COALESCE(MAX(id), 0) FROM `{}_released`", log.table)).await?;
        log.top = Some(end.unwrap_or(0));
        return Ok(Vec::new());
    };
    let now = Instant::now();
    log.gaps.retain(|_, skipped| now.duration_since(*skipped) < GAP_KEPT);
    let low = log.gaps.keys().next().map_or(top, |oldest| oldest - 1);
    let rows: Vec<(i64, String, String)> = conn
        .query(format!("SELECT id, LOWER(HEX(ns)), LOWER(HEX(k)) FROM `{}_released` WHERE id > {low} ORDER BY id LIMIT 1024", log.table))
        .await?;
    Ok(log.read(top, rows, now))
}

impl Log {
    /// The freed keys of `rows` (the log from below the oldest gap, by id)
    /// not seen before; `top` is the highest id seen so far.
    fn read(&mut self, mut top: i64, rows: Vec<(i64, String, String)>, now: Instant) -> Vec<(String, String)> {
        let mut freed = BTreeSet::new();
        for (id, ns, key) in rows {
            if id > top {
                // A jump of more than GAPS_KEPT ids keeps its last ones only.
                for skipped in (top + 1).max(id - GAPS_KEPT as i64)..id {
                    self.gaps.insert(skipped, now);
                }
                top = id;
            } else if self.gaps.remove(&id).is_none() {
                continue;
            }
            freed.insert((ns, key));
        }
        self.top = Some(top);
        while self.gaps.len() > GAPS_KEPT {
            self.gaps.pop_first();
        }
        freed.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, key: &str) -> (i64, String, String) {
        (id, "6d".to_owned(), key.to_owned())
    }

    #[test]
    fn the_log_is_read_every_millisecond_not_every_two() {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_time().build().unwrap();
        // The best of five trials of 50 pauses: a loaded host only ever
        // makes a pause longer.
        let mean = (0..5)
            .map(|_| {
                let start = Instant::now();
                runtime.block_on(async {
                    for _ in 0..50 {
                        pause(EVERY).await;
                    }
                });
                start.elapsed() / 50
            })
            .min()
            .unwrap();
        assert!(mean < EVERY * 7 / 5, "a pause of {EVERY:?} took {mean:?} on average");
    }

    #[test]
    fn a_release_that_commits_after_a_later_one_is_found_once() {
        let mut log = Log { table: "t".to_owned(), top: Some(10), gaps: BTreeMap::new() };
        let now = Instant::now();
        // 11 took its id first and has not committed: 12 is read, 11 is a gap.
        assert_eq!(log.read(10, vec![row(12, "b")], now), [("6d".to_owned(), "b".to_owned())]);
        assert_eq!(log.gaps.keys().copied().collect::<Vec<_>>(), [11]);
        // The next read starts below the gap: 11 is new, 12 was seen.
        assert_eq!(log.read(12, vec![row(11, "a"), row(12, "b")], now), [("6d".to_owned(), "a".to_owned())]);
        assert!(log.gaps.is_empty());
        assert_eq!(log.read(12, vec![], now), Vec::<(String, String)>::new());
        // A jump keeps the last GAPS_KEPT ids only.
        log.read(12, vec![row(10_000, "c")], now);
        assert_eq!(log.gaps.len(), GAPS_KEPT);
    }
}
