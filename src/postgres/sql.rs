//! The statements the driver sends: each one call of a function of
//! [`super::schema`], so each operation is one round trip and one
//! transaction. Keys, namespace and token are always bind parameters.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::schema::{Table, CLOCK_US};
use super::transport::connection::PgConnection;
use crate::inspect::{Inspection, SHOWN_HOLDERS};
use crate::store::inspect::HolderRow;
use crate::store::reply::{self, HandOverReply};
use crate::store::{Failure, Taken};

/// The calls of one table.
pub(crate) struct Statements {
    take: String,
    renew: String,
    give_back: String,
    withdraw: String,
    hand_over: String,
    force_release: String,
    fence_counter: String,
    inspect: String,
    /// `inspect` of a holders table an older release made, without the
    /// `fence` column (read by a driver that installs nothing to read).
    inspect_without_fences: String,
    /// The keys table's name, quoted, for `to_regclass`.
    keys: String,
}

/// One hand-off's arguments (see `hand_over` in the schema): the released
/// lease's keys and token (none: empty), then the requests', flattened,
/// each with its own lease terms (`lease_ms`, `retention_ms`).
pub(crate) struct HandOverArgs<'a> {
    pub namespace: &'a str,
    pub channel: &'a str,
    pub lease_ms: Vec<i64>,
    pub waiting_ms: i64,
    pub retention_ms: Vec<i64>,
    pub lock_timeout_ms: i64,
    pub released_keys: &'a [String],
    pub released_token: &'a str,
    pub tokens: Vec<&'a str>,
    pub shared: Vec<bool>,
    pub limits: Vec<i32>,
    pub weights: Vec<i32>,
    pub tickets: Vec<i64>,
    pub counts: Vec<i32>,
    pub keys: Vec<&'a str>,
}

/// The rows of one owner token that a renewal, a give-back or a withdrawal
/// changes, and how long it waits for their keys' row locks.
pub(crate) struct Owner<'a> {
    pub namespace: &'a str,
    pub keys: &'a [String],
    pub token: &'a str,
    pub lock_timeout_ms: i64,
}

/// One request's arguments to `take`.
pub(crate) struct TakeArgs<'a> {
    pub namespace: &'a str,
    pub keys: &'a [String],
    pub token: &'a str,
    pub shared: bool,
    pub limit: i32,
    pub weight: i32,
    pub lease_ms: i64,
    pub waiting_ms: i64,
    pub ticket: i64,
    pub retention_ms: i64,
    pub lock_timeout_ms: i64,
}

impl Statements {
    pub fn new(table: &Table) -> Statements {
        Statements {
            take: format!("SELECT {}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", table.name("_take")),
            renew: format!("SELECT {}($1, $2, $3, $4, $5)", table.name("_renew")),
            give_back: format!("SELECT {}($1, $2, $3, $4, $5, $6)", table.name("_give_back")),
            withdraw: format!("SELECT {}($1, $2, $3, $4, $5)", table.name("_withdraw")),
            hand_over: format!("SELECT {}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)", table.name("_hand_over")),
            force_release: format!("SELECT {}($1, $2, $3, $4, $5, $6)", table.name("_force_release")),
            fence_counter: format!("SELECT fence FROM {} WHERE namespace = $1 AND key = $2", table.name("")),
            inspect: inspect_sql(table, "fence"),
            inspect_without_fences: inspect_sql(table, "NULL::bigint"),
            keys: table.name(""),
        }
    }

    /// One try at taking every key (see `take` in the schema).
    pub async fn take(&self, connection: &PgConnection, args: &TakeArgs<'_>) -> Result<Taken<()>, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 11] = [
            (&args.namespace, Type::TEXT),
            (&args.keys, Type::TEXT_ARRAY),
            (&args.token, Type::TEXT),
            (&args.shared, Type::BOOL),
            (&args.limit, Type::INT4),
            (&args.weight, Type::INT4),
            (&args.lease_ms, Type::INT8),
            (&args.waiting_ms, Type::INT8),
            (&args.ticket, Type::INT8),
            (&args.retention_ms, Type::INT8),
            (&args.lock_timeout_ms, Type::INT8),
        ];
        let reply: Vec<i64> = single(connection.query(&self.take, &params).await?)?;
        Ok(reply::taken(&reply, args.keys.len())?.0)
    }

    /// Gives back a lease and grants this process's next requests, in one
    /// statement (see `hand_over` in the schema).
    pub async fn hand_over(&self, connection: &PgConnection, args: &HandOverArgs<'_>) -> Result<HandOverReply, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 15] = [
            (&args.namespace, Type::TEXT),
            (&args.channel, Type::TEXT),
            (&args.lease_ms, Type::INT8_ARRAY),
            (&args.waiting_ms, Type::INT8),
            (&args.retention_ms, Type::INT8_ARRAY),
            (&args.lock_timeout_ms, Type::INT8),
            (&args.released_keys, Type::TEXT_ARRAY),
            (&args.released_token, Type::TEXT),
            (&args.tokens, Type::TEXT_ARRAY),
            (&args.shared, Type::BOOL_ARRAY),
            (&args.limits, Type::INT4_ARRAY),
            (&args.weights, Type::INT4_ARRAY),
            (&args.tickets, Type::INT8_ARRAY),
            (&args.counts, Type::INT4_ARRAY),
            (&args.keys, Type::TEXT_ARRAY),
        ];
        let reply: Vec<i64> = single(connection.query(&self.hand_over, &params).await?)?;
        reply::hand_over(&reply, args.released_keys.len(), args.counts.iter().map(|&count| count as usize))
    }

    /// Extends the token's live holder rows: how many.
    pub async fn renew(&self, connection: &PgConnection, owner: &Owner<'_>, lease_ms: i64) -> Result<i32, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&owner.namespace, Type::TEXT),
            (&owner.keys, Type::TEXT_ARRAY),
            (&owner.token, Type::TEXT),
            (&lease_ms, Type::INT8),
            (&owner.lock_timeout_ms, Type::INT8),
        ];
        single(connection.query(&self.renew, &params).await?)
    }

    /// Gives back the token's keys, announcing them on `channel`: how many
    /// were still held; on a `retry` of a give-back whose answer was lost,
    /// how many are given back by this token, by either attempt.
    pub async fn give_back(&self, connection: &PgConnection, owner: &Owner<'_>, channel: &str, retry: bool) -> Result<i32, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&owner.namespace, Type::TEXT),
            (&owner.keys, Type::TEXT_ARRAY),
            (&owner.token, Type::TEXT),
            (&channel, Type::TEXT),
            (&retry, Type::BOOL),
            (&owner.lock_timeout_ms, Type::INT8),
        ];
        single(connection.query(&self.give_back, &params).await?)
    }

    /// Takes back the token's waiting marks.
    pub async fn withdraw(&self, connection: &PgConnection, owner: &Owner<'_>, channel: &str) -> Result<i32, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 5] = [
            (&owner.namespace, Type::TEXT),
            (&owner.keys, Type::TEXT_ARRAY),
            (&owner.token, Type::TEXT),
            (&channel, Type::TEXT),
            (&owner.lock_timeout_ms, Type::INT8),
        ];
        single(connection.query(&self.withdraw, &params).await?)
    }

    /// The fence counter of `key` (`None`: no row).
    pub async fn fence_counter(&self, connection: &PgConnection, namespace: &str, key: &str) -> Result<Option<i64>, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 2] = [(&namespace, Type::TEXT), (&key, Type::TEXT)];
        let rows = connection.query(&self.fence_counter, &params).await?;
        rows.first().map(|row| row.try_get(0).map_err(|err| Failure::Refused(std::sync::Arc::new(err)))).transpose()
    }

    /// Removes every holder of `key`, raises its fence (kept
    /// `retention_ms`) and announces it on `channel` (see `force_release`
    /// in the schema): the live holders removed, and the fence; `None`
    /// when the counter is no longer `expected` (nothing changed).
    #[allow(clippy::too_many_arguments)] // one per parameter of the function
    pub async fn force_release(
        &self,
        connection: &PgConnection,
        namespace: &str,
        key: &str,
        channel: &str,
        retention_ms: i64,
        expected: Option<i64>,
        lock_timeout_ms: i64,
    ) -> Result<Option<(u32, u64)>, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 6] = [
            (&namespace, Type::TEXT),
            (&key, Type::TEXT),
            (&channel, Type::TEXT),
            (&retention_ms, Type::INT8),
            (&expected, Type::INT8),
            (&lock_timeout_ms, Type::INT8),
        ];
        let reply: Vec<i64> = single(connection.query(&self.force_release, &params).await?)?;
        match reply[..] {
            [-1, 0] => Ok(None),
            [removed, fence] => Ok(Some((u32::try_from(removed).unwrap_or(u32::MAX), fence as u64))),
            _ => Err(unexpected("not a forced release's {removed, fence}")),
        }
    }
}

/// The read of `inspect`: one row (an aggregate without GROUP BY has one
/// even when no holder matches), no function. `fence` is the holders
/// table's column, or NULL where the table has none. Each holder's time
/// held is the server's clock now in µs, read once for the statement
/// ([`CLOCK_US`], a materialized CTE), less its fence, in whole ms (see
/// [`crate::store::inspect::rows`]); NULL when the fence is unknown or
/// above the clock.
fn inspect_sql(table: &Table, fence: &str) -> String {
    format!(
        "WITH clock AS MATERIALIZED (SELECT {CLOCK_US} AS us) \
         SELECT (SELECT fence FROM {keys} WHERE namespace = $1 AND key = $2), \
         (SELECT count(*) FROM {waiting} WHERE namespace = $1 AND key = $2 AND lapses_at > now()), \
         (SELECT count(*) FROM {holders} WHERE namespace = $1 AND key = $2 AND expires_at > now()), \
         coalesce(array_agg(h.shared ORDER BY h.expires_at), '{{}}'), \
         coalesce(array_agg(h.lim ORDER BY h.expires_at), '{{}}'), \
         coalesce(array_agg(h.weight ORDER BY h.expires_at), '{{}}'), \
         coalesce(array_agg(greatest(0, floor(extract(epoch FROM h.expires_at - now()) * 1000))::bigint ORDER BY h.expires_at), '{{}}'), \
         coalesce(array_agg(h.token ORDER BY h.expires_at), '{{}}'), \
         coalesce(array_agg(h.fence ORDER BY h.expires_at), '{{}}'), \
         coalesce(array_agg(CASE WHEN h.fence <= h.us THEN (h.us - h.fence) / 1000 END ORDER BY h.expires_at), '{{}}') \
         FROM (SELECT shared, lim, weight, expires_at, token, {fence} AS fence, clock.us FROM {holders}, clock \
           WHERE namespace = $1 AND key = $2 AND expires_at > now() ORDER BY expires_at LIMIT {SHOWN_HOLDERS}) h",
        keys = table.name(""),
        waiting = table.name("_waiting"),
        holders = table.name("_holders"),
    )
}

impl Statements {
    /// What the tables hold of `key` (see `Store::inspect`): a holders
    /// table an older release made, which has no `fence` column yet (a
    /// driver of this version reads tables it has not installed), is read
    /// without, every fence unknown.
    pub async fn inspect(&self, connection: &PgConnection, namespace: &str, key: &str) -> Result<Inspection, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 2] = [(&namespace, Type::TEXT), (&key, Type::TEXT)];
        let rows = match connection.query(&self.inspect, &params).await {
            Err(Failure::Refused(cause)) if undefined_column(&cause) => connection.query(&self.inspect_without_fences, &params).await?,
            rows => rows?,
        };
        let row = rows.first().ok_or_else(|| unexpected("no row"))?;
        let read = |err| Failure::Refused(std::sync::Arc::new(err));
        let fence: Option<i64> = row.try_get(0).map_err(read)?;
        let waiting: i64 = row.try_get(1).map_err(read)?;
        let live: i64 = row.try_get(2).map_err(read)?;
        let shared: Vec<bool> = row.try_get(3).map_err(read)?;
        let limits: Vec<i32> = row.try_get(4).map_err(read)?;
        let weights: Vec<i32> = row.try_get(5).map_err(read)?;
        let remaining: Vec<i64> = row.try_get(6).map_err(read)?;
        let tokens: Vec<String> = row.try_get(7).map_err(read)?;
        let fences: Vec<Option<i64>> = row.try_get(8).map_err(read)?;
        let held: Vec<Option<i64>> = row.try_get(9).map_err(read)?;
        let holders: Vec<HolderRow> = shared
            .into_iter()
            .zip(limits)
            .zip(weights)
            .zip(remaining)
            .zip(tokens)
            .zip(fences.into_iter().zip(held))
            .map(|(((((shared, limit), weight), remaining_ms), token), (fence, held_ms))| HolderRow {
                shared,
                limit,
                weight,
                remaining_ms,
                token,
                fence,
                held_ms,
            })
            .collect();
        Ok(crate::store::inspect::rows(fence, waiting, live, &holders))
    }

    /// True when the keys table (or its schema) does not exist.
    pub async fn keys_table_missing(&self, connection: &PgConnection) -> Result<bool, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 1] = [(&self.keys, Type::TEXT)];
        single(connection.query("SELECT to_regclass($1) IS NULL", &params).await?)
    }
}

/// PostgreSQL's "no such column" (42703).
fn undefined_column(cause: &crate::error::Cause) -> bool {
    let code = cause.downcast_ref::<tokio_postgres::Error>().and_then(tokio_postgres::Error::code);
    code == Some(&tokio_postgres::error::SqlState::UNDEFINED_COLUMN)
}

/// The one value of a one-row, one-column answer.
fn single<T: for<'a> tokio_postgres::types::FromSql<'a>>(rows: Vec<Row>) -> Result<T, Failure> {
    let row = rows.first().ok_or_else(|| unexpected("no row"))?;
    row.try_get(0).map_err(|err| Failure::Refused(std::sync::Arc::new(err)))
}

fn unexpected(what: &str) -> Failure {
    Failure::Refused(std::sync::Arc::new(std::io::Error::other(format!("unexpected answer from PostgreSQL: {what}"))))
}
