//! The statements the driver sends: each one call of a function of
//! [`super::schema`], so each operation is one round trip and one
//! transaction. Keys, namespace and token are always bind parameters.

use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Row;

use super::schema::Table;
use super::transport::connection::PgConnection;
use crate::store::{Failure, Taken};

/// The four calls of one table.
pub(crate) struct Statements {
    take: String,
    renew: String,
    give_back: String,
    withdraw: String,
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
            renew: format!("SELECT {}($1, $2, $3, $4)", table.name("_renew")),
            give_back: format!("SELECT {}($1, $2, $3, $4)", table.name("_give_back")),
            withdraw: format!("SELECT {}($1, $2, $3, $4)", table.name("_withdraw")),
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
        Ok(match reply.first() {
            Some(1) => Taken::Granted { fences: reply[1..].iter().map(|&fence| fence as u64).collect(), written: vec![()] },
            Some(0) => Taken::Busy { hint: reply.get(1).copied().unwrap_or(-1), ticket: reply.get(2).copied().unwrap_or(0) as u64 },
            _ => Taken::OtherLimit,
        })
    }

    /// Extends the token's live holder rows: how many.
    pub async fn renew(
        &self,
        connection: &PgConnection,
        namespace: &str,
        keys: &[String],
        token: &str,
        lease_ms: i64,
    ) -> Result<i32, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 4] =
            [(&namespace, Type::TEXT), (&keys, Type::TEXT_ARRAY), (&token, Type::TEXT), (&lease_ms, Type::INT8)];
        single(connection.query(&self.renew, &params).await?)
    }

    /// Gives back the token's keys, announcing them on `channel`: how many
    /// were still held.
    pub async fn give_back(
        &self,
        connection: &PgConnection,
        namespace: &str,
        keys: &[String],
        token: &str,
        channel: &str,
    ) -> Result<i32, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 4] =
            [(&namespace, Type::TEXT), (&keys, Type::TEXT_ARRAY), (&token, Type::TEXT), (&channel, Type::TEXT)];
        single(connection.query(&self.give_back, &params).await?)
    }

    /// Takes back the token's waiting marks.
    pub async fn withdraw(
        &self,
        connection: &PgConnection,
        namespace: &str,
        keys: &[String],
        token: &str,
        channel: &str,
    ) -> Result<i32, Failure> {
        let params: [(&(dyn ToSql + Sync), Type); 4] =
            [(&namespace, Type::TEXT), (&keys, Type::TEXT_ARRAY), (&token, Type::TEXT), (&channel, Type::TEXT)];
        single(connection.query(&self.withdraw, &params).await?)
    }
}

/// The one value of a one-row, one-column answer.
fn single<T: for<'a> tokio_postgres::types::FromSql<'a>>(rows: Vec<Row>) -> Result<T, Failure> {
    let row = rows.first().ok_or_else(|| unexpected("no row"))?;
    row.try_get(0).map_err(|err| Failure::Refused(std::sync::Arc::new(err)))
}

fn unexpected(what: &str) -> Failure {
    Failure::Refused(std::sync::Arc::new(std::io::Error::other(format!("unexpected answer from PostgreSQL: {what}"))))
}
