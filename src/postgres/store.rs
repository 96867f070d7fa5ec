//! The postgres driver's side of the store seam (`crate::store::Store`):
//! each operation is one statement (see `super::sql`) on the
//! connection's pool; the tables are made sure of before the first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio_postgres::error::SqlState;

use super::schema::{Table, ALREADY_CREATED, NEWER_INSTALLED};
use super::sql::{HandOverArgs, Owner, Statements, TakeArgs};
use super::transport::connection::PgConnection;
use crate::acquire::{LockKind, LockMode};
use crate::error::{Cause, Result};
use crate::holder::HolderLabel;
use crate::inspect::Inspection;
use crate::options::PostgresOptions;
use crate::store::give_back::give_back;
use crate::store::resend::resend_if_lost;
use crate::store::set_up_retry::SetUpRetry;
use crate::store::waiters::Waiters;
use crate::store::{Claim as StoreClaim, Failure, Freed, HandedOver, Refusal, Store, StoreConnection, Taken, Terms};

/// What the postgres backends of one connection share: the connection and
/// this process's queues of its keys.
pub(crate) type Shared = crate::store::Shared<PostgresStore, PgConnection>;

/// The name of a key in this process's queues: its table's release
/// channel (see [`super::schema::Table::channel`]), a space, and the key as
/// release notifications name it, `<bytes of namespace>:<namespace><key>`.
/// So no two (schema, table, namespace, key) share one: the backends of one
/// connection that keep their keys in different tables or schemas share no
/// queue. The channel names one table and has no space in it (the options
/// allow lowercase letters, digits and `_` in the names).
pub(crate) fn queue_name(channel: &str, notified: &str) -> String {
    format!("{channel} {notified}")
}

/// A key as release notifications name it (see `give_back` in the schema).
fn notified_name(namespace: &str, key: &str) -> String {
    format!("{}:{namespace}{key}", namespace.len())
}

/// The keys, kind, lease terms and owner token of one lease (or acquire in
/// progress).
pub struct Claim {
    keys: Vec<String>,
    names: Vec<String>,
    kind: LockKind,
    terms: Terms,
    token: String,
}

impl StoreClaim for Claim {
    fn len(&self) -> usize {
        self.keys.len()
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    fn kind(&self) -> &LockKind {
        &self.kind
    }

    fn terms(&self) -> Terms {
        self.terms
    }
}

/// One postgres backend's reach: its connection, table and namespace.
pub struct PostgresStore {
    shared: Arc<Shared>,
    namespace: String,
    table: Table,
    statements: Statements,
    channel: String,
    auto_create: bool,
    /// The tables were found (or created): checked once per backend.
    ready: AtomicBool,
    ensuring: tokio::sync::Mutex<()>,
    set_up_retry: SetUpRetry,
}

impl PostgresStore {
    pub(crate) fn new(shared: Arc<Shared>, options: &PostgresOptions) -> PostgresStore {
        let table = Table::new(&options.schema, &options.table);
        PostgresStore {
            shared,
            namespace: options.store.namespace.clone(),
            statements: Statements::new(&table),
            channel: table.channel(),
            table,
            auto_create: options.auto_create,
            ready: AtomicBool::new(false),
            ensuring: tokio::sync::Mutex::new(()),
            set_up_retry: SetUpRetry::default(),
        }
    }

    fn connection(&self) -> &PgConnection {
        &self.shared.connection
    }

    /// Makes sure the tables and functions exist before the first
    /// operation: finds them (one query), or creates them (`autoCreate`;
    /// one transaction, serialised between processes by a
    /// transaction-scoped advisory lock, which a pooler in transaction mode
    /// keeps), or refuses with the SQL to run. Tables that are there are
    /// left alone: the user need not own them.
    async fn ensure(&self) -> Result<(), Failure> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        // Checked by each caller at once (not one after the other behind
        // the creators' mutex: with the server unreachable, the k-th would
        // fail after k connect timeouts); only creating is serialised.
        let rows = self.connection().query(&self.table.check_sql(), &[]).await.map_err(Failure::in_set_up)?;
        let column = |at| rows.first().and_then(|row| row.try_get::<_, Option<bool>>(at).ok().flatten()).unwrap_or(false);
        if column(1) {
            return Err(self.newer_installed());
        }
        if !column(0) {
            let _ensuring = self.ensuring.lock().await;
            if self.ready.load(Ordering::Acquire) {
                return Ok(());
            }
            if !self.auto_create {
                let sql = self.table.script_sql(CREATORS_LOCK);
                return Err(Failure::Denied(Arc::new(Refusal {
                    message: format!("the lock tables {} are missing (or incomplete) and autoCreate is false", self.table.display()),
                    fix: format!("Run this SQL as a user that may create them (or set autoCreate: true):\n{sql}"),
                    cause: Arc::new(std::io::Error::other(format!("{} not found", self.table.display()))),
                })));
            }
            // One simple-protocol message: its statements run as one
            // transaction, which stops early when another process created
            // the tables while this one waited for the creators' lock.
            self.set_up_retry.pending()?;
            let created = self.connection().batch(&self.table.create_once_sql(CREATORS_LOCK)).await.map_err(Failure::in_set_up);
            match self.set_up_retry.record(created) {
                Err(Failure::Refused(cause)) if has_state(&cause, ALREADY_CREATED) => {}
                Err(Failure::Refused(cause)) if has_state(&cause, NEWER_INSTALLED) => return Err(self.newer_installed()),
                outcome => outcome?,
            }
        }
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// The functions in the schema are a newer driver's: this (older) one
    /// neither replaces them, which would take their fixes from every
    /// process, nor calls them.
    fn newer_installed(&self) -> Failure {
        Failure::Denied(Arc::new(Refusal {
            message: format!("the lock functions of {} are a newer dokebi-lock's than this process's", self.table.display()),
            fix: "Upgrade dokebi-lock in this process: an older driver does not replace newer functions.".to_owned(),
            cause: Arc::new(std::io::Error::other(format!("newer functions in {}", self.table.display()))),
        }))
    }

    /// The rows `claim`'s token owns in this backend's namespace.
    fn owner<'a>(&'a self, claim: &'a Claim) -> Owner<'a> {
        Owner { namespace: &self.namespace, keys: &claim.keys, token: &claim.token, lock_timeout_ms: self.lock_timeout_ms() }
    }

    /// Row-lock waits end at three quarters of `commandTimeoutMs`: a
    /// statement stalled behind another session's row lock is then refused
    /// by the server (nothing done, `PROVIDER_FAILED`) before the driver
    /// stops waiting for its answer, which would leave the outcome unknown.
    fn lock_timeout_ms(&self) -> i64 {
        (self.connection().command_timeout().as_millis() as i64 * 3 / 4).max(1)
    }
}

/// The transaction-scoped advisory lock that serialises the processes
/// creating the tables.
const CREATORS_LOCK: i64 = 7238119025318740561;

/// The creation stopped with SQLSTATE `state` (see [`ALREADY_CREATED`] and
/// [`NEWER_INSTALLED`]).
fn has_state(cause: &Cause, state: &str) -> bool {
    cause.downcast_ref::<tokio_postgres::Error>().and_then(|err| err.as_db_error()).is_some_and(|db| db.code().code() == state)
}

impl Store for PostgresStore {
    type Claim = Claim;
    type Written = ();
    /// The key's fence counter (`None`: no row).
    type Observed = Option<u64>;
    const NAME: &'static str = "PostgreSQL";
    const DRIVER: &'static str = "postgres";

    fn waiters(&self) -> &Arc<Waiters<Self>> {
        &self.shared.waiters
    }

    fn claim(&self, keys: &[&str], kind: LockKind, terms: Terms, holder: &HolderLabel) -> Result<Claim> {
        Ok(Claim {
            keys: keys.iter().map(|key| (*key).to_owned()).collect(),
            names: keys.iter().map(|key| queue_name(&self.channel, &notified_name(&self.namespace, key))).collect(),
            kind,
            terms,
            token: crate::store::token::owner_token(holder)?,
        })
    }

    /// One statement reaches every key.
    fn hands_over(&self) -> bool {
        true
    }

    async fn take(&self, claim: &Claim, waiting_ms: u64, ticket: u64) -> Result<Taken<()>, Failure> {
        self.ensure().await?;
        let args = TakeArgs {
            namespace: &self.namespace,
            keys: &claim.keys,
            token: &claim.token,
            shared: claim.kind.mode == LockMode::Shared,
            limit: units(claim.kind.limit),
            weight: units(claim.kind.weight),
            lease_ms: millis(claim.terms.lease_ms),
            waiting_ms: waiting_ms as i64,
            ticket: ticket as i64,
            retention_ms: millis(claim.terms.retention_ms),
            lock_timeout_ms: self.lock_timeout_ms(),
        };
        self.statements.take(self.connection(), &args).await
    }

    /// Sent again when its connection was lost under it (a session ended,
    /// a connection cut: [`Store::lost_with_its_connection`]), as
    /// [`resend_if_lost`] says: a renewal extends only the live rows of the
    /// lease's token, and counts them, whatever the first attempt did. The
    /// lease's validity still counts from the first attempt's send.
    async fn extend(&self, claim: &Claim) -> Result<(bool, Vec<()>), Failure> {
        let owner = &self.owner(claim);
        let call = |_retry| self.statements.renew(self.connection(), owner, millis(claim.terms.lease_ms));
        let (renewed, _) = resend_if_lost(self.connection().pool_size(), Self::lost_with_its_connection, call).await?;
        Ok((renewed as usize == claim.keys.len(), vec![()]))
    }

    /// Sent again when its connection was lost under it (a session ended,
    /// a connection cut: [`Store::lost_with_its_connection`]), as [`give_back`]
    /// says (a released row keeps its token, see `give_back` in the schema).
    async fn give_back(&self, claim: &Claim) -> Result<Freed, Failure> {
        let owner = &self.owner(claim);
        let call = |retry| async move { self.statements.give_back(self.connection(), owner, &self.channel, retry).await.map(i64::from) };
        give_back(claim, &self.shared.waiters, self.connection().pool_size(), Self::lost_with_its_connection, call).await
    }

    async fn hand_over(&self, released: Option<&Claim>, requests: &[(&Claim, u64)], waiting_ms: u64) -> Result<HandedOver<()>, Failure> {
        self.ensure().await?;
        let args = HandOverArgs {
            namespace: &self.namespace,
            channel: &self.channel,
            lease_ms: requests.iter().map(|(claim, _)| millis(claim.terms.lease_ms)).collect(),
            waiting_ms: waiting_ms as i64,
            retention_ms: requests.iter().map(|(claim, _)| millis(claim.terms.retention_ms)).collect(),
            lock_timeout_ms: self.lock_timeout_ms(),
            released_keys: released.map_or(&[], |claim| &claim.keys),
            released_token: released.map_or("", |claim| &claim.token),
            tokens: requests.iter().map(|(claim, _)| claim.token.as_str()).collect(),
            shared: requests.iter().map(|(claim, _)| claim.kind.mode == LockMode::Shared).collect(),
            limits: requests.iter().map(|(claim, _)| units(claim.kind.limit)).collect(),
            weights: requests.iter().map(|(claim, _)| units(claim.kind.weight)).collect(),
            tickets: requests.iter().map(|(_, ticket)| *ticket as i64).collect(),
            counts: requests.iter().map(|(claim, _)| claim.keys.len() as i32).collect(),
            keys: requests.iter().flat_map(|(claim, _)| claim.keys.iter().map(String::as_str)).collect(),
        };
        let reply = self.statements.hand_over(self.connection(), &args).await?;
        let all = released.is_some_and(|claim| reply.released as usize == claim.keys.len());
        Ok(HandedOver { freed: Freed { all, first_attempt_lost: None, refused_first: None }, wake: reply.wake, taken: reply.taken })
    }

    /// A read of the tables alone: it installs nothing (an operator's read
    /// needs no DDL and no functions of this version); where the keys table
    /// (or its schema) was never made, nothing is kept. Another table
    /// missing (a partial restore) is an error: a holder may be hidden.
    /// The server names whichever table it looked up first, so a missing
    /// table is followed by a second read: is the keys table there? A
    /// holders table an older release made, without the `fence` column
    /// yet, is read without it (see `Statements::inspect`). Each holder's
    /// fence and time held: see [`crate::store::inspect::rows`].
    async fn inspect(&self, key: &str) -> Result<Inspection, Failure> {
        let read = self.statements.inspect(self.connection(), &self.namespace, key).await;
        if let Err(Failure::Refused(cause)) = &read {
            if missing_table(cause) && self.statements.keys_table_missing(self.connection()).await? {
                return Ok(crate::store::inspect::nothing_kept());
            }
        }
        read
    }

    /// Installs the tables first when they are missing, as a take would:
    /// the break that follows needs them. The counter alone: every grant
    /// raises it, in the row a physical replica or a restore copies exactly
    /// with the grant; and a key row is never cleaned up while its key is
    /// held, so "no row" read here cannot come back beside a holder granted
    /// since.
    async fn observe(&self, key: &str, _retention_ms: u64) -> Result<Option<u64>, Failure> {
        self.ensure().await?;
        Ok(self.statements.fence_counter(self.connection(), &self.namespace, key).await?.map(|counter| counter.max(0) as u64))
    }

    async fn force_release(&self, key: &str, retention_ms: u64, expected: &Option<u64>) -> Result<Option<(u32, u64)>, Failure> {
        let expected = *expected;
        self.ensure().await?;
        let (namespace, lock_timeout_ms) = (&self.namespace, self.lock_timeout_ms());
        let expected = expected.map(|counter| i64::try_from(counter).unwrap_or(i64::MAX));
        let forced = self
            .statements
            .force_release(self.connection(), namespace, key, &self.channel, millis(retention_ms), expected, lock_timeout_ms)
            .await?;
        // This process's own waiters need no round trip through the
        // server's NOTIFY, as after a give-back.
        self.shared.waiters.wake(&queue_name(&self.channel, &notified_name(namespace, key)));
        Ok(forced)
    }

    async fn withdraw(&self, claim: &Claim, _ticket: u64) {
        let _ = self.statements.withdraw(self.connection(), &self.owner(claim), &self.channel).await;
    }

    /// A grant is as durable as the server's commit (`synchronous_commit`,
    /// synchronous standbys): nothing more to wait for.
    async fn replicated(&self, _claim: &Claim, _written: &[()]) -> Result<(), Failure> {
        Ok(())
    }

    fn store_connection(&self) -> &dyn StoreConnection {
        self.connection()
    }

    /// An error of the client library (the server's answer was an end of
    /// session, or the socket closed), not a timeout's cause.
    fn lost_with_its_connection(cause: &crate::error::Cause) -> bool {
        cause.downcast_ref::<tokio_postgres::Error>().is_some()
    }
}

/// Milliseconds as the functions take them (the options keep every one
/// far below `i64::MAX`).
fn millis(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A limit or weight as the tables keep it.
fn units(units: u32) -> i32 {
    i32::try_from(units).unwrap_or(i32::MAX)
}

/// The server's "no such table" or "no such schema" (of whichever table
/// it looked up first: see `Statements::keys_table_missing`).
fn missing_table(cause: &Cause) -> bool {
    let code = cause.downcast_ref::<tokio_postgres::Error>().and_then(tokio_postgres::Error::code);
    code.is_some_and(|code| [SqlState::UNDEFINED_TABLE, SqlState::INVALID_SCHEMA_NAME].contains(code))
}
