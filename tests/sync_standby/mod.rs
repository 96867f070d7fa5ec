//! A PostgreSQL primary's synchronous standby, and taking it down so that
//! every commit waits for it: the setting of the reviews of grants whose
//! wait for the standby is cancelled or cut (review_r19, review_r23). A
//! test crate that uses it declares `mod postgres` and `mod server`
//! (tests/postgres/server.rs).

#![allow(dead_code)]

use super::postgres::{self, batch_on, count_on, eventually};
use super::server;

/// The primary's WAL position, as text.
pub fn wal_position(url: &str) -> String {
    postgres::rows_on(url, "SELECT pg_current_wal_lsn()::text")[0].get(0)
}

/// Waits until the standby at `url` replayed the primary's WAL up to `position`.
pub fn replayed(url: &str, position: &str) {
    eventually("the standby replayed the primary's WAL", || {
        count_on(url, &format!("SELECT (pg_last_wal_replay_lsn() >= '{position}'::pg_lsn)::int::bigint")) == 1
    });
}

/// Makes every commit wait for the standby, once it streams, before the
/// test's clients connect: set after they did, a client's backend could
/// commit before it reloaded the setting, and the test waited in vain for
/// a commit waiting for the standby (seen once in four runs).
pub fn synchronous(admin: &str) {
    batch_on(admin, "ALTER SYSTEM SET synchronous_standby_names = '*'");
    batch_on(admin, "SELECT pg_reload_conf()");
    eventually("the standby streams synchronously", || {
        count_on(admin, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'") == 1
    });
}

/// Stops the (synchronous) standby once it has everything: every commit
/// from then on waits for it.
pub fn standby_down(admin: &str, standby: &mut server::PrivateServer) {
    replayed(&standby.url(), &wal_position(admin));
    standby.stop();
}
