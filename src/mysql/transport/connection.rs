//! One `dokebi-mysql` connection: a few connections (`poolSize`) for the
//! lock statements, one statement at a time on each, every statement
//! bounded by `commandTimeoutMs`, and the classification of every failure
//! into [`Failure`].
//!
//! Statements go out as text (`COM_QUERY`): one round trip, no prepared
//! statement left on the server, nothing else sent on a connection (no
//! reset, no `SET`; at connect, one `SHOW` of the settings the driver
//! cannot run under), so a multiplexing proxy (ProxySQL) keeps sharing its
//! backend connections. A statement that outlasts its bound has its
//! connection killed (`KILL`, from a connection of its own), so the server
//! rolls it back unless it committed, and the connection is replaced. A
//! connection that sat idle is pinged before its statement (see
//! [`IDLE_CHECK`]; a `COM_PING`, which ProxySQL answers itself, pinning
//! nothing).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_async::Conn;
use tokio::runtime::Handle;

use super::tls;
use super::url::{target, SslMode, Target};
use crate::error::Result;
use crate::options::MysqlConnectionOptions;
use crate::store::tls_keys;
use crate::store::{Connectivity, Failure, Health, Refusal, StoreConnection};
use crate::telemetry::Telemetry;

/// A named connection of `dokebi-mysql.connections`.
pub(crate) struct MysqlConnection {
    /// `<name>` of `dokebi-mysql.connections.<name>`.
    name: String,
    target: Target,
    connect_timeout: Duration,
    command_timeout: Duration,
    slots: Vec<tokio::sync::Mutex<Option<Pooled>>>,
    next: AtomicUsize,
    health: Health,
    stopped: AtomicBool,
    runtime: Handle,
    /// When a statement was last lost with its connection: a pooled
    /// connection that last answered before then is pinged first, however
    /// recently (a restart closes them all; the next statement on one
    /// would be lost too, and a waiting acquire's give-back after a lost
    /// take must be answered at its first attempt to try again).
    lost_at: std::sync::Mutex<Option<Instant>>,
}

/// A connection of the pool, and when its last statement was answered.
struct Pooled {
    conn: Conn,
    answered: Instant,
}

/// How long a pooled connection may sit idle before it is pinged ahead of
/// its next statement (HikariCP's is 500 ms). A server closes idle
/// connections (`wait_timeout`, a proxy's idle limit) and a restart or a
/// failover closes them all, without a word the client reads until it
/// sends: a statement sent on such a connection fails with its outcome
/// unknown, and an acquire is not sent again (its take may have run). A
/// ping runs nothing, so a failed one is replaced by a new connection with
/// nothing to doubt. A connection in steady use is never pinged.
const IDLE_CHECK: Duration = Duration::from_secs(1);

/// The installation's own connection (see [`MysqlConnection::installer`]),
/// closed when dropped: its session state (`sql_mode`) ends with it.
pub(crate) struct Installer<'a> {
    connection: &'a MysqlConnection,
    conn: Conn,
}

impl Installer<'_> {
    /// Runs one statement of the installation (DDL, or a check), with a
    /// longer bound than a lock statement's: the first row's columns.
    pub async fn run(&mut self, sql: &str) -> std::result::Result<Vec<Option<String>>, Failure> {
        let bound = self.connection.command_timeout.max(Duration::from_secs(10));
        match tokio::time::timeout(bound, self.conn.query_first::<mysql_async::Row, _>(sql)).await {
            Ok(Ok(row)) => Ok(row.map(|row| columns(&row)).unwrap_or_default()),
            Ok(Err(err)) => Err(classify_statement(err, self.connection)),
            Err(elapsed) => Err(Failure::Unknown(Arc::new(elapsed))),
        }
    }
}

/// The rows a statement's answer keeps.
#[derive(Clone, Copy)]
enum Rows {
    /// The first (a `CALL`'s reply, a count).
    First,
    /// Every row of the first result.
    All,
}

/// A row's columns as text (NULL: `None`).
fn columns(row: &mysql_async::Row) -> Vec<Option<String>> {
    (0..row.len()).map(|at| row.get_opt::<Option<String>, _>(at).and_then(|value| value.ok()).flatten()).collect()
}

/// MySQL's and MariaDB's error numbers the classification names.
mod code {
    pub const DB_ACCESS_DENIED: u16 = 1044;
    pub const ACCESS_DENIED: u16 = 1045;
    pub const BAD_DB: u16 = 1049;
    pub const SERVER_SHUTDOWN: u16 = 1053;
    pub const TABLE_ACCESS_DENIED: u16 = 1142;
    pub const COLUMN_ACCESS_DENIED: u16 = 1143;
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    pub const DEADLOCK: u16 = 1213;
    pub const QUERY_INTERRUPTED: u16 = 1317;
    pub const PROCEDURE_ACCESS_DENIED: u16 = 1370;
    pub const CONNECTION_KILLED: u16 = 1927;
    pub const STATEMENT_TIMEOUT: u16 = 1969;
    pub const SPECIFIC_ACCESS_DENIED: u16 = 1227;
}

impl MysqlConnection {
    /// Reads the options (a URL that cannot be used is `PROVIDER_FAILED`
    /// now); connects only when first used.
    pub fn new(name: &str, options: &MysqlConnectionOptions, runtime: Handle, telemetry: Option<Telemetry>) -> Result<MysqlConnection> {
        let target = target(&options.url, &format!("{}.url", option(name)))?;
        Ok(MysqlConnection {
            name: name.to_owned(),
            target,
            connect_timeout: Duration::from_millis(u64::from(options.connect_timeout_ms)),
            command_timeout: Duration::from_millis(u64::from(options.command_timeout_ms)),
            slots: (0..options.pool_size).map(|_| tokio::sync::Mutex::new(None)).collect(),
            next: AtomicUsize::new(0),
            health: Health::new(name, telemetry),
            stopped: AtomicBool::new(false),
            runtime,
            lost_at: std::sync::Mutex::new(None),
        })
    }

    /// How many connections the pool keeps.
    pub fn pool_size(&self) -> usize {
        self.slots.len()
    }

    /// The user of the URL, for messages.
    pub fn user(&self) -> &str {
        &self.target.user
    }

    /// `dokebi-mysql.connections.<name>`, for messages.
    pub fn option(&self) -> String {
        option(&self.name)
    }

    /// The database of the URL, where the tables live.
    pub fn database(&self) -> &str {
        &self.target.database
    }

    /// Runs one statement and answers the first row's columns as text
    /// (NULL: `None`); no row: empty.
    pub async fn query(&self, sql: &str) -> std::result::Result<Vec<Option<String>>, Failure> {
        Ok(self.run(sql, self.command_timeout, Rows::First).await?.into_iter().next().unwrap_or_default())
    }

    /// Runs one statement and answers every row of its first result, each
    /// as [`MysqlConnection::query`]'s.
    pub async fn query_rows(&self, sql: &str) -> std::result::Result<Vec<Vec<Option<String>>>, Failure> {
        self.run(sql, self.command_timeout, Rows::All).await
    }

    /// A connection of its own for the installation, in `sql_mode`: the
    /// pool's connections never carry a `SET` (see the module's comment).
    pub async fn installer(&self, sql_mode: &str) -> std::result::Result<Installer<'_>, Failure> {
        let conn = self.connect().await.inspect_err(|failure| self.health.failed(failure))?;
        let mut installer = Installer { connection: self, conn };
        installer.run(&format!("SET SESSION sql_mode = '{sql_mode}'")).await?;
        Ok(installer)
    }

    async fn run(&self, sql: &str, bound: Duration, rows: Rows) -> std::result::Result<Vec<Vec<Option<String>>>, Failure> {
        if self.is_shut_down() {
            return Err(Failure::Unreachable(Arc::new(std::io::Error::other("the connection was closed"))));
        }
        let mut slot = self.slot().await;
        let pooled = match slot.take() {
            Some(pooled) if pooled.answered.elapsed() < IDLE_CHECK && !self.lost_since(pooled.answered) => Some(pooled.conn),
            Some(pooled) => self.alive(pooled.conn, bound).await.inspect_err(|failure| self.health.failed(failure))?,
            None => None,
        };
        let mut conn = match pooled {
            Some(conn) => conn,
            None => self.connect().await.inspect_err(|failure| self.health.failed(failure))?,
        };
        let id = conn.id();
        let fetch = async {
            match rows {
                Rows::First => conn.query_first::<mysql_async::Row, _>(sql).await.map(|row| row.into_iter().collect()),
                Rows::All => conn.query::<mysql_async::Row, _>(sql).await,
            }
        };
        let outcome = tokio::time::timeout(bound, fetch).await;
        let failure = match outcome {
            Ok(Ok(rows)) => {
                *slot = Some(Pooled { conn, answered: Instant::now() });
                self.health.answered();
                return Ok(rows.iter().map(columns).collect());
            }
            Ok(Err(err)) => {
                let failure = classify_statement(err, self);
                if failure.is_unknown() {
                    *self.lost_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
                } else {
                    // The server answered: the connection is as good as before.
                    *slot = Some(Pooled { conn, answered: Instant::now() });
                }
                failure
            }
            Err(elapsed) => {
                // The server may still be running it (behind a row lock, a
                // slow commit): its connection is ended, so it does not run
                // on while retries pile up behind it.
                drop(conn);
                let target = self.target.clone();
                let connect_timeout = self.connect_timeout;
                self.runtime.spawn(async move {
                    // Opened as the pool's are: a plain `Conn::new` fails
                    // under PREFERRED on a server without TLS, and the
                    // statement ran on.
                    if let Ok(Ok(mut killer)) = tokio::time::timeout(connect_timeout, tls::open(&target)).await {
                        let _ = killer.query_drop(format!("KILL {id}")).await;
                        let _ = killer.disconnect().await;
                    }
                });
                Failure::Unknown(Arc::new(elapsed))
            }
        };
        self.health.failed(&failure);
        Err(failure)
    }

    /// True when a statement was lost with its connection after `answered`.
    fn lost_since(&self, answered: Instant) -> bool {
        self.lost_at.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|lost| lost > answered)
    }

    /// `conn`, an idle pooled connection, if it answers a ping within
    /// `bound`; `None` (it is dropped) if it is closed. A ping that gets no
    /// answer within `bound` is the server stalled, not gone: the call ends
    /// as if its statement had gone unanswered ([`Failure::Unknown`]), as it
    /// did before there was a ping, rather than on a new connection's
    /// connect timeout, which reads as the store down (a policy would fall
    /// back on it while the stalled server's holders still hold).
    async fn alive(&self, mut conn: Conn, bound: Duration) -> std::result::Result<Option<Conn>, Failure> {
        match tokio::time::timeout(bound, conn.ping()).await {
            Ok(Ok(())) => Ok(Some(conn)),
            Ok(Err(_)) => Ok(None),
            Err(elapsed) => Err(Failure::Unknown(Arc::new(elapsed))),
        }
    }

    /// A free slot of the pool: the first one not in use from the next in
    /// turn, else the next in turn once it is free.
    async fn slot(&self) -> tokio::sync::MutexGuard<'_, Option<Pooled>> {
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        for at in 0..self.slots.len() {
            if let Ok(slot) = self.slots[(start + at) % self.slots.len()].try_lock() {
                return slot;
            }
        }
        self.slots[start % self.slots.len()].lock().await
    }

    /// A new connection within `connectTimeoutMs` (with the second try its
    /// `ssl-mode` may call for: see [`tls::open`]).
    pub async fn connect(&self) -> std::result::Result<Conn, Failure> {
        let conn = match tokio::time::timeout(self.connect_timeout, tls::open(&self.target)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Err(self.classify_connect(err)),
            Err(elapsed) => return Err(Failure::Unreachable(Arc::new(elapsed))),
        };
        self.suitable(conn).await
    }

    /// `conn`, unless its server runs with a setting the procedures cannot
    /// work under. Read at every connect, in one statement, as a server may
    /// be restarted or set anew (`SET GLOBAL`) under a running process, and
    /// a failover may reach a server configured otherwise. A `SHOW`: MySQL
    /// 8 has no `@@wsrep_on` to select (an error there), while `SHOW`
    /// answers no row for it. Global values: a new session starts with
    /// them, and the driver sets none on the pool's connections.
    async fn suitable(&self, mut conn: Conn) -> std::result::Result<Conn, Failure> {
        let shown =
            conn.query::<(String, String), _>("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'log_bin', 'binlog_format')");
        let settings = match tokio::time::timeout(self.command_timeout, shown).await {
            Ok(Ok(settings)) => settings,
            Ok(Err(err)) => return Err(classify_statement(err, self)),
            // Connected, and the server does not answer: up (stalled), so
            // not unreachable (`crate::store::reach` says why).
            Err(elapsed) => return Err(Failure::Unanswered(Arc::new(elapsed))),
        };
        let setting = |name: &str| settings.iter().find(|(shown, _)| shown.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str());
        // A row lock holds on its own Galera node only, and another node's
        // call on the same key meets it at certification, which aborts one
        // commit (1213): releases failed so, and acquires stalled past their
        // command timeout, on a two-node cluster here (tests/mysql_galera.rs).
        if setting("wsrep_on") == Some("ON") {
            return Err(self.unsuitable(
                "is a node of a Galera cluster (wsrep_on = ON), where the lock procedures' row locks hold on one node only and certification aborts their commits",
                "wsrep_on = ON",
                "Keep the locks on a MariaDB or MySQL server outside the Galera cluster (asynchronous or semi-synchronous replication is supported), or use another driver: docs/mysql.md says why.",
            ));
        }
        // Logged as statements, every write of a READ COMMITTED transaction
        // is refused (1665), and that isolation is what keeps a key's call
        // from locking its neighbours' rows.
        if setting("log_bin") == Some("ON") && setting("binlog_format") == Some("STATEMENT") {
            return Err(self.unsuitable(
                "logs statements (binlog_format = STATEMENT), which refuses every write of the lock procedures' READ COMMITTED transactions",
                "binlog_format = STATEMENT",
                "Set the server's binlog_format to ROW or MIXED (SET GLOBAL binlog_format = 'ROW', and binlog_format = ROW in its configuration, which a restart reads).",
            ));
        }
        Ok(conn)
    }

    /// The refusal of a server that runs with `setting`, under which the
    /// driver does not run at all: "the MySQL server of … `is`", and `fix`.
    fn unsuitable(&self, is: &str, setting: &str, fix: &str) -> Failure {
        Failure::Denied(Arc::new(Refusal {
            message: format!("the MySQL server of {} {is}", self.option()),
            fix: fix.to_owned(),
            cause: Arc::new(std::io::Error::other(setting.to_owned())),
        }))
    }

    /// A failure before any statement ran: the server refusing who we are
    /// (the message names the user, never the password), or unreachable.
    fn classify_connect(&self, err: mysql_async::Error) -> Failure {
        let name = option(&self.name);
        let (user, database) = (self.user(), self.database());
        let denied = |message: String, fix: String, err: mysql_async::Error| {
            Failure::Denied(Arc::new(Refusal { message, fix, cause: Arc::new(err) }))
        };
        if let mysql_async::Error::Other(other) = &err {
            if let Some(unreadable) = other.downcast_ref::<tls::UnreadableFile>() {
                let parameter = unreadable.parameter;
                return denied(
                    format!("{unreadable} (in {name}.url)"),
                    format!("Point {parameter} in {name}.url at a readable PEM file."),
                    err,
                );
            }
        }
        // Before the I/O errors: mysql_async passes a failed handshake up
        // as one, but the server answered.
        if let Some(tls) = tls::handshake_failure(&err) {
            return match tls {
                // Told apart from a chain's own signature only where no
                // chain is checked (mysql_async makes the verifier).
                refused if self.target.mode == SslMode::Required && tls_keys::refused_signature(refused) => denied(
                    format!("the TLS certificate of MySQL was refused for {name}: {}", tls_keys::UNCHECKABLE),
                    tls_keys::fix("ssl-mode=REQUIRED"),
                    err,
                ),
                rustls::Error::InvalidCertificate(refused) => denied(
                    format!("the TLS certificate of MySQL was refused for {name} ({refused})"),
                    format!(
                        "Trust the server's authority (ssl-ca in {name}.url), connect by the name its certificate carries (VERIFY_IDENTITY), or lower ssl-mode."
                    ),
                    err,
                ),
                failed => denied(
                    format!("the TLS handshake with the MySQL server of {name} failed ({failed})"),
                    format!("If the server asks for a client certificate, give one its authority signed (ssl-cert and ssl-key in {name}.url); else lower ssl-mode."),
                    err,
                ),
            };
        }
        match &err {
            mysql_async::Error::Server(server) => match server.code {
                code::ACCESS_DENIED => denied(
                    format!("MySQL refused the credentials of user '{user}' of {name}"),
                    format!("Check the user and password in {name}.url (and the account's host in mysql.user)."),
                    err,
                ),
                code::DB_ACCESS_DENIED => {
                    denied(format!("user '{user}' of {name} may not use database '{database}'"), grant(user, database), err)
                }
                code::BAD_DB => denied(
                    format!("the database '{database}' of {name} does not exist"),
                    format!("Create the database (CREATE DATABASE `{database}`) or correct the database name in {name}.url."),
                    err,
                ),
                _ => Failure::Refused(Arc::new(err)),
            },
            mysql_async::Error::Driver(mysql_async::DriverError::NoClientSslFlagFromServer) => denied(
                format!("the MySQL server of {name} has no TLS and ssl-mode asks for it"),
                format!("Turn TLS on in the server, or lower ssl-mode in {name}.url."),
                err,
            ),
            // mysql_async's making of the TLS configuration: the files of
            // ssl-ca, ssl-cert and ssl-key, read, could not be used (not
            // PEM, a key that is not the certificate's).
            mysql_async::Error::Io(mysql_async::IoError::Tls(unusable)) => denied(
                format!("the TLS settings of {name} cannot be used ({unusable})"),
                format!("Point ssl-ca, ssl-cert and ssl-key in {name}.url at PEM files of certificates and a key that match."),
                err,
            ),
            mysql_async::Error::Driver(_) | mysql_async::Error::Other(_) | mysql_async::Error::Url(_) => Failure::Refused(Arc::new(err)),
            mysql_async::Error::Io(_) => Failure::Unreachable(Arc::new(err)),
        }
    }

    /// What `status()` reports, and whether releases reach this process.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Closes every idle connection; statements under way end with theirs.
    pub fn shut_down(&self) {
        self.stopped.store(true, Ordering::Release);
        for slot in &self.slots {
            if let Ok(mut slot) = slot.try_lock() {
                if let Some(pooled) = slot.take() {
                    self.runtime.spawn(pooled.conn.disconnect());
                }
            }
        }
        self.health.set_connected(false);
    }
}

impl StoreConnection for MysqlConnection {
    /// True while the release poller reads the log (see `super::super::notify`).
    fn is_notified(&self) -> bool {
        self.health.is_listening()
    }

    fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// True once [`MysqlConnection::shut_down`] ran.
    fn is_shut_down(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }

    fn connectivity(&self) -> Connectivity {
        self.health.connectivity()
    }
}

/// The option of connection `name`, as messages name it.
fn option(name: &str) -> String {
    format!("dokebi-mysql.connections.{name}")
}

/// The `GRANT` that lets `user` run the driver in `database`.
fn grant(user: &str, database: &str) -> String {
    format!(
        "Run as an administrator: GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON `{database}`.* TO '{user}'@'%' (with CREATE, ALTER ROUTINE and CREATE ROUTINE too while autoCreate is true, and ALTER for the first start of a release that adds a column)."
    )
}

/// A failure of a statement that was sent: the server's error (each
/// procedure rolls its transaction back whole on an error: nothing was
/// done), a missing privilege (with its `GRANT`), or no answer (it may
/// have committed).
fn classify_statement(err: mysql_async::Error, connection: &MysqlConnection) -> Failure {
    match &err {
        mysql_async::Error::Server(server) => match server.code {
            // An administrator ended our connection or query, the server
            // is shutting down, or a `max_statement_time` (the server's, a
            // user's `MAX_STATEMENT_TIME`) interrupted the call as a `KILL
            // QUERY` does: the procedure's commit may have happened first
            // (its answer comes after it). Read as refused, a take so cut
            // moved a policy's key while its grant stood.
            code::CONNECTION_KILLED | code::QUERY_INTERRUPTED | code::STATEMENT_TIMEOUT | code::SERVER_SHUTDOWN => {
                Failure::Unknown(Arc::new(err))
            }
            code::TABLE_ACCESS_DENIED
            | code::COLUMN_ACCESS_DENIED
            | code::PROCEDURE_ACCESS_DENIED
            | code::DB_ACCESS_DENIED
            | code::SPECIFIC_ACCESS_DENIED => {
                let message = format!(
                    "user '{}' of {} lacks a privilege the lock driver needs ({})",
                    connection.user(),
                    option(&connection.name),
                    server.message
                );
                Failure::Denied(Arc::new(Refusal { message, fix: grant(connection.user(), connection.database()), cause: Arc::new(err) }))
            }
            // It waited longer than `innodb_lock_wait_timeout` for a row
            // another call locks, or was chosen as a deadlock's victim.
            code::LOCK_WAIT_TIMEOUT | code::DEADLOCK => Failure::Contended(Arc::new(err)),
            // 1290 and 1792 (read-only) and the rest: refused, nothing done.
            _ => Failure::Refused(Arc::new(err)),
        },
        _ => Failure::Unknown(Arc::new(err)),
    }
}
