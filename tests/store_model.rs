//! The model-based concurrency test of each store driver on its real
//! server (issue 49 §2; the file driver in a private directory, mysql the machine's MariaDB in tables of its own): random schedules of every kind of acquire,
//! renew, release, close and lease expiry across three clients with two
//! backends each, under restarts, reloads and slow commits; the checker
//! (`store_model/check.rs`) reads the history for two holders at once, an
//! overtaken renew, a fence out of order and anything left behind.
//!
//! The short form runs in `scripts/test`; the long form is
//! `STORE_MODEL_SECONDS=600 cargo test --test store_model -- --test-threads 1`.
//! `STORE_MODEL_SEED=n` repeats a run's choices; `STORE_MODEL_ALL=1` also
//! runs what `model::KNOWN_OPEN` leaves out.

mod support;

#[path = "postgres/server.rs"]
mod server;

#[path = "mysql/mod.rs"]
mod mysql;

mod store_model {
    pub mod check;
    pub mod file;
    pub mod history;
    pub mod model;
    pub mod mysql;
    pub mod postgres;
    pub mod redis;
    pub mod rng;
}

use store_model::model::{run, seconds};

/// The short form's length per store.
const SHORT_SECONDS: u64 = 35;

#[test]
fn redis_keeps_one_holder_and_rising_fences_under_reloads() {
    run(&store_model::redis::RedisModel::start(), seconds(SHORT_SECONDS));
}

#[test]
fn postgres_keeps_one_holder_and_rising_fences_under_restarts() {
    run(&store_model::postgres::PostgresModel::start(), seconds(SHORT_SECONDS));
}

#[test]
fn mysql_keeps_one_holder_and_rising_fences_under_killed_connections() {
    run(&store_model::mysql::MysqlModel::start(), seconds(SHORT_SECONDS));
}

#[test]
fn file_keeps_one_holder_and_rising_fences() {
    run(&store_model::file::FileModel::start(), seconds(SHORT_SECONDS));
}
