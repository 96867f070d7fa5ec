//! The mysql driver's side of the store seam (`crate::store::Store`):
//! each operation is one `CALL` (see `super::sql`) on the connection's
//! pool; the tables and procedures are made sure of before the first.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::schema::{installed, ours, version, Installed, Table, SQL_MODE};
use super::sql::{hex, hex_list, Owner, Request, Statements, TakeArgs};
use super::transport::connection::MysqlConnection;
use crate::acquire::{LockKind, LockMode};
use crate::error::Result;
use crate::holder::HolderLabel;
use crate::inspect::Inspection;
use crate::options::MysqlOptions;
use crate::store::give_back::give_back;
use crate::store::resend::resend_if_lost;
use crate::store::set_up_retry::SetUpRetry;
use crate::store::waiters::Waiters;
use crate::store::{Claim as StoreClaim, Failure, Freed, HandedOver, Refusal, Store, StoreConnection, Taken, Terms};

/// What the mysql backends of one connection share: the connection and
/// this process's queues of its keys.
pub(crate) type Shared = crate::store::Shared<MysqlStore, MysqlConnection>;

/// The name of a key in this process's queues: its table, namespace and
/// key as their columns keep them (hex), as the release log names them. So
/// no two (table, namespace, key) share one: the backends of one connection
/// that keep their keys in different tables or namespaces share no queue.
pub(crate) fn queue_name(table: &str, namespace: &str, key: &str) -> String {
    format!("{table} {namespace} {key}")
}

/// The longest name a column keeps whole (`VARBINARY(255)`).
const NAME_COLUMN_BYTES: usize = 255;

/// A namespace or key as its column keeps it: its UTF-8 bytes when they
/// fit, else `0xFF` and their SHA-256 (no UTF-8 text starts with `0xFF`,
/// so a digest never equals a name kept whole).
fn stored(name: &str) -> Vec<u8> {
    if name.len() <= NAME_COLUMN_BYTES {
        return name.as_bytes().to_vec();
    }
    use sha2::{Digest, Sha256};
    let mut digest = vec![0xFF];
    digest.extend_from_slice(&Sha256::digest(name.as_bytes()));
    digest
}

/// The keys, kind, lease terms and owner token of one lease (or acquire in
/// progress).
pub struct Claim {
    /// Each key's stored name, in the caller's order.
    stored: Vec<Vec<u8>>,
    /// The caller's indexes in the byte order of the stored names: the
    /// order every procedure locks and answers in.
    order: Vec<usize>,
    /// The stored names in that order, as the procedures take them.
    sorted: String,
    names: Vec<String>,
    kind: LockKind,
    terms: Terms,
    token: String,
}

impl Claim {
    /// `answers` (one per key, in the procedures' order) in the caller's.
    fn in_callers_order<T: Copy + Default>(&self, answers: &[T]) -> Vec<T> {
        let mut ordered = vec![T::default(); self.stored.len()];
        for (at, &index) in self.order.iter().enumerate() {
            ordered[index] = answers.get(at).copied().unwrap_or_default();
        }
        ordered
    }

    /// The claim as a take or a hand-off asks for it, under `ticket`.
    fn request(&self, ticket: u64) -> Request<'_> {
        Request {
            keys: &self.sorted,
            count: self.stored.len(),
            token: &self.token,
            shared: self.kind.mode == LockMode::Shared,
            limit: self.kind.limit,
            weight: self.kind.weight,
            lease_ms: self.terms.lease_ms,
            ticket,
            retention_ms: self.terms.retention_ms,
        }
    }

    /// A grant's fences in the caller's order.
    fn reordered(&self, taken: Taken<()>) -> Taken<()> {
        match taken {
            Taken::Granted { fences, written } => Taken::Granted { fences: self.in_callers_order(&fences), written },
            other => other,
        }
    }
}

impl StoreClaim for Claim {
    fn len(&self) -> usize {
        self.stored.len()
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

/// One mysql backend's reach: its connection, table and namespace.
pub struct MysqlStore {
    shared: Arc<Shared>,
    /// The namespace's stored name, hex.
    namespace: String,
    table: Table,
    /// The table's name, as queue names start with it.
    table_name: String,
    statements: Statements,
    auto_create: bool,
    /// The tables and procedures were found (or created): checked once per
    /// backend, again after the server said one is missing.
    ready: AtomicBool,
    ensuring: tokio::sync::Mutex<()>,
    set_up_retry: SetUpRetry,
}

impl MysqlStore {
    pub(crate) fn new(shared: Arc<Shared>, options: &MysqlOptions) -> MysqlStore {
        let table = Table::new(&options.table);
        let namespace = &options.store.namespace;
        MysqlStore {
            shared,
            namespace: hex(&stored(namespace)),
            table_name: options.table.clone(),
            statements: Statements::new(&table),
            table,
            auto_create: options.auto_create,
            ready: AtomicBool::new(false),
            ensuring: tokio::sync::Mutex::new(()),
            set_up_retry: SetUpRetry::default(),
        }
    }

    fn connection(&self) -> &MysqlConnection {
        &self.shared.connection
    }

    /// Makes sure the tables and procedures exist before the first
    /// operation: finds them (one query), or installs them (`autoCreate`),
    /// or refuses with the SQL to run. A newer driver's procedures are left
    /// alone. A statement of it that waited out a lock (1205, 1213: a
    /// `LOCK TABLES` or DDL of another session on the tables) is refused,
    /// as [`Failure::in_set_up`] says: no key is busy.
    async fn ensure(&self) -> Result<(), Failure> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.installed().await? {
            Installed::Current => {}
            Installed::Newer => return Err(self.newer_installed()),
            Installed::Missing => {
                let _ensuring = self.ensuring.lock().await;
                if self.ready.load(Ordering::Acquire) {
                    return Ok(());
                }
                if !self.auto_create {
                    return Err(Failure::Denied(Arc::new(Refusal {
                        message: format!(
                            "the lock tables or procedures {} are missing (or older) and autoCreate is false",
                            self.table.display()
                        ),
                        fix: format!(
                            "Run this SQL in database {} as a user that may create them (or set autoCreate: true):\n{}",
                            self.connection().database(),
                            self.table.create_sql()
                        ),
                        cause: Arc::new(std::io::Error::other(format!("{} not found", self.table.display()))),
                    })));
                }
                self.set_up_retry.pending()?;
                self.set_up_retry.record(self.install().await.map_err(Failure::in_set_up))?;
                match self.installed().await? {
                    Installed::Current => {}
                    Installed::Newer => return Err(self.newer_installed()),
                    Installed::Missing => {
                        return Err(Failure::Refused(Arc::new(std::io::Error::other(format!(
                            "the lock procedures of {} are still missing after their installation",
                            self.table.display()
                        )))))
                    }
                }
            }
        }
        self.ready.store(true, Ordering::Release);
        Ok(())
    }

    /// Creates what is missing, one statement each (MySQL's DDL is not
    /// transactional). A procedure is never dropped while it is of this
    /// version: processes starting together may install at once, and a
    /// process that found everything in place calls the procedures while
    /// another still installs; only an older one is dropped and created
    /// again (an upgrade: a call in that window fails once), and so is one
    /// created in another `sql_mode`. All on a connection of its own, whose
    /// `sql_mode` the procedures keep; the pool's are never changed.
    async fn install(&self) -> Result<(), Failure> {
        let mut installer = self.connection().installer(SQL_MODE).await?;
        for table in self.table.tables() {
            match installer.run(&table).await {
                // The column another installer added meanwhile (see
                // `TABLES`): there, as wanted.
                Err(Failure::Refused(cause)) if server_code(&cause) == Some(DUPLICATE_COLUMN) => {}
                outcome => drop(outcome?),
            }
        }
        for (name, create) in self.table.procedures() {
            match installer.run(&create).await {
                Err(Failure::Refused(cause)) if server_code(&cause) == Some(ALREADY_EXISTS) => {
                    let row = installer.run(&self.table.version_sql(&name)).await?;
                    match row.first().cloned().flatten().as_deref().map(version) {
                        Some((Some(theirs), true)) if theirs == ours() => {}
                        Some((Some(theirs), _)) if theirs > ours() => return Err(self.newer_installed()),
                        _ => {
                            installer.run(&format!("DROP PROCEDURE IF EXISTS `{name}`")).await?;
                            match installer.run(&create).await {
                                Err(Failure::Refused(cause)) if server_code(&cause) == Some(ALREADY_EXISTS) => {}
                                outcome => drop(outcome?),
                            }
                        }
                    }
                }
                outcome => drop(outcome?),
            }
        }
        Ok(())
    }

    async fn installed(&self) -> Result<Installed, Failure> {
        let row = self.connection().query(&self.table.check_sql()).await.map_err(Failure::in_set_up)?;
        let listing = row.first().cloned().flatten();
        let tables = row.get(1).cloned().flatten().and_then(|count| count.parse().ok()).unwrap_or(0);
        Ok(installed(listing.as_deref(), self.table.procedures().len(), tables))
    }

    fn newer_installed(&self) -> Failure {
        Failure::Denied(Arc::new(Refusal {
            message: format!("the lock procedures of {} are a newer dokebi-lock's than this process's", self.table.display()),
            fix: "Upgrade dokebi-lock in this process: an older driver does not replace newer procedures.".to_owned(),
            cause: Arc::new(std::io::Error::other(format!("newer procedures for {}", self.table.display()))),
        }))
    }

    /// A failure that says a table or procedure is gone (dropped under a
    /// running process): the next operation makes sure of them again.
    fn noticed(&self, failure: Failure) -> Failure {
        if let Failure::Refused(cause) = &failure {
            if matches!(server_code(cause), Some(NO_SUCH_TABLE | NO_SUCH_PROCEDURE)) {
                self.ready.store(false, Ordering::Release);
            }
        }
        failure
    }

    /// The rows `claim`'s token owns in this backend's namespace.
    fn owner<'a>(&'a self, claim: &'a Claim) -> Owner<'a> {
        Owner { namespace: &self.namespace, keys: &claim.sorted, token: &claim.token, lock_wait_s: self.lock_wait_s() }
    }

    /// Row-lock waits (`innodb_lock_wait_timeout`, whole seconds) end at
    /// three quarters of `commandTimeoutMs`, at least 1 s: a call stalled
    /// behind another's row lock is then refused by the server (1205,
    /// nothing done) before the driver stops waiting for its answer, for a
    /// `commandTimeoutMs` of 1334 or more.
    fn lock_wait_s(&self) -> u64 {
        (self.connection().command_timeout().as_millis() as u64 * 3 / 4 / 1000).max(1)
    }
}

/// MySQL's "already exists" for a procedure (1304), "no such table" (1146)
/// and "no such procedure" (1305), "duplicate column" (1060) and "no such
/// column" (1054).
const ALREADY_EXISTS: u16 = 1304;
const DUPLICATE_COLUMN: u16 = 1060;
const NO_SUCH_COLUMN: u16 = 1054;
const NO_SUCH_TABLE: u16 = 1146;
const NO_SUCH_PROCEDURE: u16 = 1305;
fn server_code(cause: &crate::error::Cause) -> Option<u16> {
    match cause.downcast_ref::<mysql_async::Error>() {
        Some(mysql_async::Error::Server(server)) => Some(server.code),
        _ => None,
    }
}

impl Store for MysqlStore {
    type Claim = Claim;
    type Written = ();
    /// The key's fence counter (`None`: no row).
    type Observed = Option<u64>;
    const NAME: &'static str = "MySQL";
    const DRIVER: &'static str = "mysql";

    fn waiters(&self) -> &Arc<Waiters<Self>> {
        &self.shared.waiters
    }

    fn claim(&self, keys: &[&str], kind: LockKind, terms: Terms, holder: &HolderLabel) -> Result<Claim> {
        let stored: Vec<Vec<u8>> = keys.iter().map(|key| stored(key)).collect();
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by(|&a, &b| stored[a].cmp(&stored[b]));
        Ok(Claim {
            sorted: hex_list(order.iter().map(|&at| stored[at].as_slice())),
            order,
            names: stored.iter().map(|key| queue_name(&self.table_name, &self.namespace, &hex(key))).collect(),
            stored,
            kind,
            terms,
            token: crate::store::token::owner_token(holder)?,
        })
    }

    /// One call reaches every key.
    fn hands_over(&self) -> bool {
        true
    }

    async fn take(&self, claim: &Claim, waiting_ms: u64, ticket: u64) -> Result<Taken<()>, Failure> {
        self.ensure().await?;
        let args = TakeArgs { namespace: &self.namespace, request: claim.request(ticket), waiting_ms, lock_wait_s: self.lock_wait_s() };
        let taken = self.statements.take(self.connection(), &args).await.map_err(|failure| self.noticed(failure))?;
        Ok(claim.reordered(taken))
    }

    /// Sent again when its connection was lost under it (a connection the
    /// server closed while it sat in the pool, a restart), as
    /// [`resend_if_lost`] says: a renewal extends only the live rows of the
    /// lease's token, and counts them, whatever the first attempt did. The
    /// lease's validity still counts from the first attempt's send.
    async fn extend(&self, claim: &Claim) -> Result<(bool, Vec<()>), Failure> {
        let owner = self.owner(claim);
        let call = |_retry| self.statements.renew(self.connection(), &owner, claim.terms.lease_ms);
        let (renewed, _) = resend_if_lost(self.connection().pool_size(), Self::lost_with_its_connection, call).await?;
        Ok((renewed as usize == claim.stored.len(), vec![()]))
    }

    /// Sent again when its connection was lost under it (killed, cut), as
    /// [`give_back`] says.
    async fn give_back(&self, claim: &Claim) -> Result<Freed, Failure> {
        let owner = self.owner(claim);
        let call = |retry| self.statements.give_back(self.connection(), &owner, retry);
        give_back(claim, &self.shared.waiters, self.connection().pool_size(), Self::lost_with_its_connection, call).await
    }

    async fn hand_over(&self, released: Option<&Claim>, requests: &[(&Claim, u64)], waiting_ms: u64) -> Result<HandedOver<()>, Failure> {
        self.ensure().await?;
        let mut every: Vec<&[u8]> = released
            .into_iter()
            .chain(requests.iter().map(|(claim, _)| *claim))
            .flat_map(|claim| claim.stored.iter().map(Vec::as_slice))
            .collect();
        every.sort();
        every.dedup();
        let calls: Vec<Request> = requests.iter().map(|(claim, ticket)| claim.request(*ticket)).collect();
        let released_args = released.map_or(("", 0, ""), |claim| (claim.sorted.as_str(), claim.stored.len(), claim.token.as_str()));
        let reply = self
            .statements
            .hand_over(
                self.connection(),
                &self.namespace,
                (&hex_list(every.iter().copied()), every.len()),
                released_args,
                &calls,
                waiting_ms,
                self.lock_wait_s(),
            )
            .await
            .map_err(|failure| self.noticed(failure))?;
        let all = released.is_some_and(|claim| reply.released as usize == claim.stored.len());
        let wake = released.map_or_else(Vec::new, |claim| claim.in_callers_order(&reply.wake));
        let taken = reply.taken.into_iter().zip(requests).map(|(taken, (claim, _))| claim.reordered(taken)).collect();
        Ok(HandedOver { freed: Freed { all, first_attempt_lost: None, refused_first: None }, wake, taken })
    }

    /// A read of the tables alone: it installs nothing (an operator's read
    /// needs no DDL and no procedures of this version); where the keys
    /// table was never made, nothing is kept. Another table missing (a
    /// partial restore) is an error: a holder may be hidden. The server
    /// names whichever table it looked up first, so a missing table is
    /// followed by a second read: is the keys table there? A holders table
    /// an older release made, without the `fence` column yet, is read
    /// without it, every fence unknown. Each holder's fence and time held:
    /// see [`crate::store::inspect::rows`].
    async fn inspect(&self, key: &str) -> Result<Inspection, Failure> {
        let key = hex(&stored(key));
        let read = match self.statements.inspect(self.connection(), &self.namespace, &key, true).await {
            Err(Failure::Refused(cause)) if server_code(&cause) == Some(NO_SUCH_COLUMN) => {
                self.statements.inspect(self.connection(), &self.namespace, &key, false).await
            }
            read => read,
        };
        if let Err(Failure::Refused(cause)) = &read {
            if server_code(cause) == Some(NO_SUCH_TABLE) && self.statements.keys_table_missing(self.connection()).await? {
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
        let counter = self.statements.fence_counter(self.connection(), &self.namespace, &hex(&stored(key))).await?;
        Ok(counter.map(|counter| counter.max(0) as u64))
    }

    async fn force_release(&self, key: &str, retention_ms: u64, expected: &Option<u64>) -> Result<Option<(u32, u64)>, Failure> {
        let expected = *expected;
        self.ensure().await?;
        let key = hex(&stored(key));
        let forced = self
            .statements
            .force_release(self.connection(), &self.namespace, &key, retention_ms, expected, self.lock_wait_s())
            .await
            .map_err(|failure| self.noticed(failure))?;
        // This process's own waiters need not wait for its poller to read
        // the log, as after a give-back.
        self.shared.waiters.wake(&queue_name(&self.table_name, &self.namespace, &key));
        Ok(forced)
    }

    async fn withdraw(&self, claim: &Claim, _ticket: u64) {
        let _ = self.statements.withdraw(self.connection(), &self.owner(claim)).await;
    }

    /// A grant is as durable as the server's commit
    /// (`innodb_flush_log_at_trx_commit`, `sync_binlog`, semi-synchronous
    /// replicas): nothing more to wait for.
    async fn replicated(&self, _claim: &Claim, _written: &[()]) -> Result<(), Failure> {
        Ok(())
    }

    fn store_connection(&self) -> &dyn StoreConnection {
        self.connection()
    }

    /// An error of the client library (the connection closed or reset, the
    /// server's end of the session or statement: 1927, 1053, 1317, 1969),
    /// not a timeout's cause.
    fn lost_with_its_connection(cause: &crate::error::Cause) -> bool {
        cause.downcast_ref::<mysql_async::Error>().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_digests_that_no_name_kept_whole_equals() {
        assert_eq!(stored("k"), b"k".to_vec());
        let long = "k".repeat(NAME_COLUMN_BYTES + 1);
        assert_eq!(stored(&long).len(), 33);
        assert_eq!(stored(&long)[0], 0xFF);
        assert_ne!(stored(&long), stored(&"k".repeat(NAME_COLUMN_BYTES + 2)));
    }
}
