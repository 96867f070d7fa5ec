//! The statements the driver sends: each one `CALL` of a procedure of
//! [`super::schema`], so each operation is one round trip and one
//! transaction.
//!
//! The calls go out as text, not as prepared statements: a prepared
//! statement costs a second round trip (prepare, then execute) or stays
//! open on the server, which a multiplexing proxy has to pin a connection
//! for. So nothing of a key, a namespace or a token is ever SQL text: a
//! namespace is a hex literal (`X'…'`), keys travel as a string of hex
//! digits and commas, tokens are hex digits already, the rest numbers the
//! driver formats. A hostile key cannot change a statement: every
//! character it puts into one is `0-9a-f`.

use super::schema::{Table, CLOCK};
use super::transport::connection::MysqlConnection;
use crate::inspect::{Inspection, SHOWN_HOLDERS};
use crate::store::inspect::HolderRow;
use crate::store::reply::{self, HandOverReply};
use crate::store::{Failure, Taken};

/// One request's arguments to `take`: the request, in the backend's
/// namespace, waiting `waiting_ms` when refused.
pub(crate) struct TakeArgs<'a> {
    pub namespace: &'a str,
    pub request: Request<'a>,
    pub waiting_ms: u64,
    pub lock_wait_s: u64,
}

/// One request, of a take or a hand-off: keys as [`hex_list`] of their
/// stored names, sorted.
pub(crate) struct Request<'a> {
    pub keys: &'a str,
    pub count: usize,
    pub token: &'a str,
    pub shared: bool,
    pub limit: u32,
    pub weight: u32,
    pub lease_ms: u64,
    pub ticket: u64,
    pub retention_ms: u64,
}

/// The calls of one table.
pub(crate) struct Statements {
    table: Table,
}

impl Statements {
    pub fn new(table: &Table) -> Statements {
        Statements { table: table.clone() }
    }

    /// One try at taking every key (see `_try` in the schema); fences in
    /// the order of `args.keys`.
    pub async fn take(&self, connection: &MysqlConnection, args: &TakeArgs<'_>) -> Result<Taken<()>, Failure> {
        let sql = format!(
            "CALL {}(X'{}', '{}', '{}', {}, {}, {}, {}, {}, {}, {}, {}, {})",
            self.table.name("_take"),
            args.namespace,
            args.request.keys,
            args.request.token,
            u8::from(args.request.shared),
            args.request.limit,
            args.request.weight,
            args.request.lease_ms,
            args.waiting_ms,
            args.request.ticket,
            args.request.retention_ms,
            args.request.count,
            args.lock_wait_s
        );
        let reply = numbers(connection.query(&sql).await?)?;
        Ok(reply::taken(&reply, args.request.count)?.0)
    }

    /// Gives back `released` (keys, how many, token; none: empty) and
    /// grants `requests` in turn, locking `lock_keys` (every key of the
    /// call, sorted, and how many) first.
    #[allow(clippy::too_many_arguments)]
    pub async fn hand_over(
        &self,
        connection: &MysqlConnection,
        namespace: &str,
        lock_keys: (&str, usize),
        released: (&str, usize, &str),
        requests: &[Request<'_>],
        waiting_ms: u64,
        lock_wait_s: u64,
    ) -> Result<HandOverReply, Failure> {
        let list = |item: &dyn Fn(&Request) -> String| requests.iter().map(item).collect::<Vec<_>>().join(",");
        let sql = format!(
            "CALL {}(X'{namespace}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', '{}', {}, {waiting_ms}, {lock_wait_s})",
            self.table.name("_hand_over"),
            lock_keys.0,
            released.0,
            released.2,
            list(&|request| request.token.to_owned()),
            list(&|request| u8::from(request.shared).to_string()),
            list(&|request| request.limit.to_string()),
            list(&|request| request.weight.to_string()),
            list(&|request| request.ticket.to_string()),
            list(&|request| request.lease_ms.to_string()),
            list(&|request| request.retention_ms.to_string()),
            requests.iter().map(|request| request.keys).collect::<Vec<_>>().join(";"),
            lock_keys.1,
        );
        let reply = numbers(connection.query(&sql).await?)?;
        reply::hand_over(&reply, released.1, requests.iter().map(|request| request.count))
    }

    /// Extends the token's live holder rows: how many.
    pub async fn renew(&self, connection: &MysqlConnection, owner: &Owner<'_>, lease_ms: u64) -> Result<i64, Failure> {
        single(connection.query(&self.owners_call("_renew", owner, Some(lease_ms))).await?)
    }

    /// Gives back the token's keys: how many were still held; on a `retry`
    /// of a give-back whose answer was lost, how many this token gave back,
    /// by either attempt.
    pub async fn give_back(&self, connection: &MysqlConnection, owner: &Owner<'_>, retry: bool) -> Result<i64, Failure> {
        single(connection.query(&self.owners_call("_give_back", owner, Some(u64::from(retry)))).await?)
    }

    /// Takes back the token's waiting marks.
    pub async fn withdraw(&self, connection: &MysqlConnection, owner: &Owner<'_>) -> Result<i64, Failure> {
        single(connection.query(&self.owners_call("_withdraw", owner, None)).await?)
    }

    /// The fence counter of the key whose stored name is `key` (hex;
    /// `None`: no row).
    pub async fn fence_counter(&self, connection: &MysqlConnection, namespace: &str, key: &str) -> Result<Option<i64>, Failure> {
        let sql = format!("SELECT (SELECT fence FROM {} WHERE ns = X'{namespace}' AND k = X'{key}')", self.table.name(""));
        match connection.query(&sql).await?.into_iter().next().flatten() {
            Some(counter) => counter.parse().map(Some).map_err(|_| refused("not a fence counter")),
            None => Ok(None),
        }
    }

    /// Removes every holder of the key whose stored name is `key` (hex),
    /// raises its fence (kept `retention_ms`) and logs it for the waiters
    /// (see `_force_release` in the schema): the live holders removed, and
    /// the fence; `None` when the counter is no longer `expected` (nothing
    /// changed).
    pub async fn force_release(
        &self,
        connection: &MysqlConnection,
        namespace: &str,
        key: &str,
        retention_ms: u64,
        expected: Option<u64>,
        lock_wait_s: u64,
    ) -> Result<Option<(u32, u64)>, Failure> {
        let expected = expected.map_or_else(|| "NULL".to_owned(), |counter| counter.to_string());
        let sql = format!("CALL {}(X'{namespace}', '{key}', {retention_ms}, {expected}, {lock_wait_s})", self.table.name("_force_release"));
        match numbers(connection.query(&sql).await?)?[..] {
            [-1, 0] => Ok(None),
            [removed, fence] => Ok(Some((u32::try_from(removed).unwrap_or(u32::MAX), fence as u64))),
            _ => Err(unexpected("not a forced release's removed,fence")),
        }
    }

    /// What the tables hold of the key whose stored name is `key` (hex; see
    /// `Store::inspect`): one `SELECT` (every one of its `UTC_TIMESTAMP`s is
    /// the statement's start), a row per listed holder, soonest expiry
    /// first, each with the key's fence, waiting marks and live holders; a
    /// key without holders is one row whose holder columns are NULL. Each
    /// holder's time held is the clock ([`CLOCK`], the grant's fence's
    /// expression) less its fence, in whole ms, NULL when the fence is
    /// unknown or above the clock (see [`crate::store::inspect::rows`]).
    /// Without `fences`, for a holders table an older release made (no
    /// `fence` column yet), every fence is NULL.
    pub async fn inspect(&self, connection: &MysqlConnection, namespace: &str, key: &str, fences: bool) -> Result<Inspection, Failure> {
        let (keys, holders, waiting) = (self.table.name(""), self.table.name("_holders"), self.table.name("_waiting"));
        let at = format!("ns = X'{namespace}' AND k = X'{key}'");
        let fence = if fences { "fence" } else { "NULL" };
        let sql = format!(
            "SELECT (SELECT fence FROM {keys} WHERE {at}), \
             (SELECT COUNT(*) FROM {waiting} WHERE {at} AND lapses_at > {CLOCK}), \
             (SELECT COUNT(*) FROM {holders} WHERE {at} AND expires_at > {CLOCK}), \
             h.shared, h.lim, h.weight, (h.expires_at - {CLOCK}) DIV 1000, h.token, \
             h.fence, IF(h.fence <= {CLOCK}, ({CLOCK} - h.fence) DIV 1000, NULL) \
             FROM (SELECT 1) one LEFT JOIN (SELECT shared, lim, weight, expires_at, token, {fence} AS fence FROM {holders} \
             WHERE {at} AND expires_at > {CLOCK} ORDER BY expires_at LIMIT {SHOWN_HOLDERS}) h ON TRUE \
             ORDER BY h.expires_at"
        );
        let rows = connection.query_rows(&sql).await?;
        let first = rows.first().ok_or_else(|| refused("no row"))?;
        let number = |row: &[Option<String>], i: usize| -> Result<Option<i64>, Failure> {
            match row.get(i).cloned().flatten() {
                None => Ok(None),
                Some(text) => text.parse().map(Some).map_err(|_| refused("not an integer")),
            }
        };
        let count = |i: usize| number(first, i).map(Option::unwrap_or_default);
        let mut listed: Vec<HolderRow> = Vec::new();
        for row in &rows {
            let Some(token) = row.get(7).cloned().flatten() else { continue };
            let column = |i: usize| number(row, i)?.ok_or_else(|| refused("a holder column is NULL"));
            let int = |value: i64| i32::try_from(value).unwrap_or(i32::MAX);
            listed.push(HolderRow {
                shared: column(3)? != 0,
                limit: int(column(4)?),
                weight: int(column(5)?),
                remaining_ms: column(6)?,
                token,
                fence: number(row, 8)?,
                held_ms: number(row, 9)?,
            });
        }
        Ok(crate::store::inspect::rows(number(first, 0)?, count(1)?, count(2)?, &listed))
    }

    /// True when the keys table is not in the connection's database (its
    /// name is an option's `[a-z_][a-z0-9_]*`).
    pub async fn keys_table_missing(&self, connection: &MysqlConnection) -> Result<bool, Failure> {
        let sql = format!(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = '{}'",
            self.table.display()
        );
        Ok(single(connection.query(&sql).await?)? == 0)
    }

    /// The `CALL` of `procedure` on `owner`'s rows: their namespace, keys
    /// and token, the procedure's own `argument` (if any), and the row-lock
    /// wait.
    fn owners_call(&self, procedure: &str, owner: &Owner<'_>, argument: Option<u64>) -> String {
        let argument = argument.map_or_else(String::new, |argument| format!("{argument}, "));
        format!(
            "CALL {}(X'{}', '{}', '{}', {argument}{})",
            self.table.name(procedure),
            owner.namespace,
            owner.keys,
            owner.token,
            owner.lock_wait_s
        )
    }
}

/// The rows of one owner token that a renewal, a give-back or a withdrawal
/// changes (keys as [`hex_list`]), and how long it waits for row locks.
pub(crate) struct Owner<'a> {
    pub namespace: &'a str,
    pub keys: &'a str,
    pub token: &'a str,
    pub lock_wait_s: u64,
}

/// `bytes` as lowercase hex digits.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Names as the procedures take a list of them: hex, comma-separated.
pub(crate) fn hex_list<'a>(names: impl IntoIterator<Item = &'a [u8]>) -> String {
    names.into_iter().map(hex).collect::<Vec<_>>().join(",")
}

/// A reply of comma-separated integers. Every procedure commits before
/// its answer: one that is missing (NULL) or not a list leaves what the
/// call did unknown, never "nothing done".
fn numbers(row: Vec<Option<String>>) -> Result<Vec<i64>, Failure> {
    let text = row.into_iter().next().flatten().ok_or_else(|| unexpected("no answer"))?;
    text.split(',').map(|number| number.trim().parse::<i64>().map_err(|_| unexpected("not a list of integers"))).collect()
}

/// The one integer of a one-row, one-column answer.
fn single(row: Vec<Option<String>>) -> Result<i64, Failure> {
    numbers(row)?.first().copied().ok_or_else(|| unexpected("no answer"))
}

/// A read's answer of another shape: nothing was done.
fn refused(what: &str) -> Failure {
    Failure::Refused(std::sync::Arc::new(std::io::Error::other(format!("unexpected answer from MySQL: {what}"))))
}

fn unexpected(what: &str) -> Failure {
    Failure::Unknown(std::sync::Arc::new(std::io::Error::other(format!("unexpected answer from MySQL: {what}"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_calls_on_an_owners_rows_name_the_namespace_keys_token_and_row_lock_wait() {
        let statements = Statements::new(&Table::new("t"));
        let owner = Owner { namespace: "6e73", keys: "6b31,6b32", token: "ab12", lock_wait_s: 2 };
        assert_eq!(statements.owners_call("_renew", &owner, Some(500)), "CALL `t_renew`(X'6e73', '6b31,6b32', 'ab12', 500, 2)");
        assert_eq!(statements.owners_call("_give_back", &owner, Some(1)), "CALL `t_give_back`(X'6e73', '6b31,6b32', 'ab12', 1, 2)");
        assert_eq!(statements.owners_call("_withdraw", &owner, None), "CALL `t_withdraw`(X'6e73', '6b31,6b32', 'ab12', 2)");
    }
}
