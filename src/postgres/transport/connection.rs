//! One `dokebi-postgres` connection: a few pipelined clients (`poolSize`)
//! for the lock statements, each statement bounded by `commandTimeoutMs`,
//! and the classification of every failure into [`Failure`].
//!
//! Statements go out with `query_typed`: one unnamed statement, its
//! parameters typed by us, in one round trip (Parse, Bind, Execute, Sync),
//! so a pooler in transaction mode has no named statement to lose and no
//! session state to carry.
//!
//! A statement answered after a `WARNING` on its client's connection is
//! answered as unknown (see [`Warnings`]): PostgreSQL answers a commit
//! whose wait for a synchronous standby was cancelled as a success, with
//! only a `WARNING` that the transaction "has already committed locally,
//! but might not have been replicated to the standby".

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::watch;
use tokio_postgres::error::{DbError, Severity, SqlState};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Config, Connection, Row, Socket};

use super::tls::{MakeRustls, RustlsStream};
use super::url;
use crate::error::Result;
use crate::options::PostgresConnectionOptions;
use crate::store::reach::no_sign_of_down;
use crate::store::{error_chain, tls_keys};
use crate::store::{Connectivity, Failure, Health, Refusal, StoreConnection};
use crate::telemetry::Telemetry;

/// One pooled client, the lock that keeps two tasks from connecting it at
/// once, and how many statements are on it now.
#[derive(Default)]
struct Slot {
    client: Mutex<Option<Arc<Pooled>>>,
    connecting: tokio::sync::Mutex<()>,
    in_flight: AtomicUsize,
}

impl Slot {
    /// Its client, when it has one whose connection lives.
    fn live(&self) -> Option<Arc<Pooled>> {
        self.client.lock().unwrap_or_else(|e| e.into_inner()).clone().filter(|pooled| !pooled.client.is_closed())
    }

    /// Its client is `pooled` no more (a later statement connects anew),
    /// unless another took its place already.
    fn forget(&self, pooled: &Arc<Pooled>) {
        let mut held = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if held.as_ref().is_some_and(|held| Arc::ptr_eq(held, pooled)) {
            *held = None;
        }
    }
}

/// A statement counted on its slot until it ends (answered, failed or
/// dropped).
struct OnSlot<'a>(&'a Slot);

impl<'a> OnSlot<'a> {
    fn enter(slot: &'a Slot) -> OnSlot<'a> {
        slot.in_flight.fetch_add(1, Ordering::Relaxed);
        OnSlot(slot)
    }
}

impl Drop for OnSlot<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A client of the pool and the `WARNING`s its connection received.
struct Pooled {
    client: Client,
    warnings: Arc<Warnings>,
}

/// The notices of severity `WARNING` that one client's connection
/// received: how many, and the last. A statement that sees the count move
/// between its send and its answer is answered as unknown, never as a
/// success: PostgreSQL answers a commit whose wait for a synchronous
/// standby was cancelled (`pg_cancel_backend`, an administrator, a
/// watchdog of long statements) with success and only such a `WARNING`
/// (no SQLSTATE of its own), and the commit is then on the primary alone,
/// where a failover to the standby loses it.
///
/// Ordering: the notice comes before the statement's `ReadyForQuery` on
/// the wire (the server says it is ready for the next query only once the
/// statement's transaction, and so the wait, ended), and tokio-postgres's
/// connection task handles the messages in the order they came: its codec
/// ends a batch of messages at a notice and hands the notice out on its
/// own, by `Connection::poll_message`, which [`drive`] counts before it
/// polls again for the messages after it. A client's `query_typed` (and
/// `batch_execute`) ends only at the `ReadyForQuery`, so the count moved
/// before the statement's answer reaches its caller. Statements pipelined
/// on one client share the count: another's warning makes a statement
/// unknown too, never the reverse.
#[derive(Default)]
struct Warnings {
    count: AtomicU64,
    last: Mutex<Option<DbError>>,
}

impl Warnings {
    fn count(&self) -> u64 {
        self.count.load(Ordering::SeqCst)
    }

    fn note(&self, notice: DbError) {
        let warning = match notice.parsed_severity() {
            Some(severity) => severity == Severity::Warning,
            // A server before 9.6 sends only its localized severity.
            None => notice.severity() == "WARNING",
        };
        if warning {
            *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some(notice);
            self.count.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The statement sent when the count was `before` was answered after a
    /// warning: why its outcome is unknown.
    fn since(&self, before: u64) -> Option<Failure> {
        if self.count() == before {
            return None;
        }
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(Failure::Unknown(Arc::new(Warned(last))))
    }
}

/// Why a statement answered after a `WARNING` is unknown. Not a
/// `tokio_postgres::Error`: the connection was not lost, and such a call
/// is not sent again (see `lost_with_its_connection` in the store).
#[derive(Debug)]
struct Warned(Option<DbError>);

impl std::fmt::Display for Warned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PostgreSQL answered the statement after a WARNING on its connection (a commit whose wait for a synchronous standby was cancelled is answered so), so whether it was done durably is unknown")?;
        match &self.0 {
            Some(warning) => write!(f, ": {warning}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for Warned {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.as_ref().map(|warning| warning as &(dyn std::error::Error + 'static))
    }
}

/// Runs a statement client's connection until it ends, counting its
/// warnings (see [`Warnings`]); notifications and other notices are
/// dropped, as the connection's own `Future` would.
async fn drive(mut connection: Connection<Socket, RustlsStream<Socket>>, warnings: Arc<Warnings>) {
    std::future::poll_fn(|cx| loop {
        match connection.poll_message(cx) {
            Poll::Ready(Some(Ok(AsyncMessage::Notice(notice)))) => warnings.note(notice),
            Poll::Ready(Some(Ok(_))) => {}
            Poll::Ready(Some(Err(_)) | None) => return Poll::Ready(()),
            Poll::Pending => return Poll::Pending,
        }
    })
    .await
}

/// How long a failed connect answers for later callers, so that a dead
/// server costs one connect attempt, not one per waiting acquire (as a
/// Redis connection's).
const CONNECT_FAILURE_REUSE: Duration = Duration::from_millis(100);

/// The connect attempts of every slot: how many ended, and the last one's
/// failure (none after a success).
#[derive(Default)]
struct Attempts {
    ended: u64,
    failure: Option<(Instant, Failure)>,
}

/// A named connection of `dokebi-postgres.connections`.
pub(crate) struct PgConnection {
    /// `<name>` of `dokebi-postgres.connections.<name>` (messages name the
    /// whole option: [`option`]).
    name: String,
    config: Config,
    tls: MakeRustls,
    /// `sslmode=allow`: `config` with TLS, tried when the server refused
    /// the connection in the clear.
    tls_fallback: Option<Config>,
    listen_config: Config,
    listen_tls: MakeRustls,
    listen_tls_fallback: Option<Config>,
    connect_timeout: Duration,
    command_timeout: Duration,
    slots: Vec<Slot>,
    next: AtomicUsize,
    /// A task that waited behind a connect attempt that failed (on any
    /// slot), or that comes within [`CONNECT_FAILURE_REUSE`] of one, takes
    /// its failure rather than trying again: with the server unreachable,
    /// the k-th of many acquires (the k-th waiter of one key, each trying
    /// once its turn came) waited k connect timeouts.
    attempts: Mutex<Attempts>,
    health: Health,
    stopped: watch::Sender<bool>,
    /// The driver's runtime, where each client's connection task runs.
    runtime: Handle,
}

impl PgConnection {
    /// Reads the options (a URL that cannot be used is `PROVIDER_FAILED`
    /// now); connects only when first used.
    pub fn new(name: &str, options: &PostgresConnectionOptions, runtime: Handle, telemetry: Option<Telemetry>) -> Result<PgConnection> {
        let path = option(name);
        let (config, tls, tls_fallback) = target(&options.url, &format!("{path}.url"))?;
        let (listen_config, listen_tls, listen_tls_fallback) = match &options.listen_url {
            Some(listen) => target(listen, &format!("{path}.listenUrl"))?,
            None => (config.clone(), tls.clone(), tls_fallback.clone()),
        };
        Ok(PgConnection {
            name: name.to_owned(),
            config,
            tls,
            tls_fallback,
            listen_config,
            listen_tls,
            listen_tls_fallback,
            connect_timeout: Duration::from_millis(u64::from(options.connect_timeout_ms)),
            command_timeout: Duration::from_millis(u64::from(options.command_timeout_ms)),
            slots: (0..options.pool_size).map(|_| Slot::default()).collect(),
            next: AtomicUsize::new(0),
            attempts: Mutex::default(),
            health: Health::new(name, telemetry),
            stopped: watch::channel(false).0,
            runtime,
        })
    }

    /// How many clients the pool keeps.
    pub fn pool_size(&self) -> usize {
        self.slots.len()
    }

    /// Runs one statement (`sql` with its typed parameters) on the client of
    /// the pool with the fewest statements on it (the next in turn among
    /// those; see [`PgConnection::pick`]): its rows, or why there are none. A client answers its
    /// pipelined statements in order, so one waiting on a row lock (a take
    /// waits up to a lock wait) holds up every statement behind it: a
    /// release sent there waited behind that take, and then behind the
    /// take's next try, which had locked the key on another client
    /// meanwhile (review_r4: two lock waits, 1.7 s under a
    /// `statement_timeout` of 800 ms, once in CI).
    pub async fn query(&self, sql: &str, params: &[(&(dyn ToSql + Sync), Type)]) -> std::result::Result<Vec<Row>, Failure> {
        if self.is_shut_down() {
            return Err(Failure::Unreachable(Arc::new(std::io::Error::other("the connection was closed"))));
        }
        let (slot, pooled, _on_slot) = self.pick().await?;
        let warned_before = pooled.warnings.count();
        let outcome = tokio::time::timeout(self.command_timeout, pooled.client.query_typed(sql, params)).await;
        // An error of the client (not a timeout) that leaves the outcome
        // unknown: the connection was lost under the statement.
        let client_error = matches!(outcome, Ok(Err(_)));
        let failure = match outcome {
            Ok(Ok(rows)) => {
                self.health.answered();
                // Answered after a warning: the client and its connection
                // are sound, the outcome is not.
                return match pooled.warnings.since(warned_before) {
                    Some(unknown) => Err(unknown),
                    None => Ok(rows),
                };
            }
            Ok(Err(err)) => classify_statement(err),
            Err(elapsed) => {
                self.cancel(&pooled);
                Failure::Unknown(Arc::new(elapsed))
            }
        };
        if failure.is_unknown() {
            // The client may be stuck behind the statement (a row lock, a
            // stalled server) or gone: later statements get a fresh one.
            slot.forget(&pooled);
        }
        if failure.is_unknown() && client_error {
            // A connection lost under a statement (a restart, a cut) may
            // have taken the pool's others with it, before their clients
            // noticed: every later statement gets a fresh client, so that a
            // waiting acquire's give-back after its lost take is answered
            // at its first attempt and not lost, or queued behind a stalled
            // statement, on one of them (statements in flight keep theirs).
            for slot in self.slots.iter() {
                *slot.client.lock().unwrap_or_else(|e| e.into_inner()) = None;
            }
        }
        self.health.failed(&failure);
        Err(failure)
    }

    /// The slot a statement goes to and its client, the statement counted
    /// on it: the slot with the fewest statements on it (of those, the
    /// first from the next in turn). When that slot had to connect and
    /// could not while another's client lives, the other's: the server
    /// answers there, and a slot whose connect fails at once (a failure
    /// reused, too many connections) would otherwise draw every statement,
    /// having none on it (review of the pool's choice).
    async fn pick(&self) -> std::result::Result<(&Slot, Arc<Pooled>, OnSlot<'_>), Failure> {
        let start = self.next.fetch_add(1, Ordering::Relaxed) % self.slots.len();
        let slot = (0..self.slots.len())
            .map(|i| &self.slots[(start + i) % self.slots.len()])
            .min_by_key(|slot| slot.in_flight.load(Ordering::Relaxed))
            .expect("a pool has a client");
        let on_slot = OnSlot::enter(slot);
        let connecting = crate::store::connecting();
        let outcome = self.client(slot).await;
        drop(connecting);
        match outcome {
            Ok(pooled) => Ok((slot, pooled, on_slot)),
            Err(failure) => match self.slots.iter().find_map(|other| other.live().map(|pooled| (other, pooled))) {
                Some((other, pooled)) => Ok((other, pooled, OnSlot::enter(other))),
                None => Err(failure),
            },
        }
    }

    /// Cancels what `pooled` runs: the server may still be running a
    /// statement whose time ran out (stalled behind a lock or a slow
    /// commit), and would run on while retries pile up behind it.
    fn cancel(&self, pooled: &Pooled) {
        let (token, tls) = (pooled.client.cancel_token(), self.tls.clone());
        self.runtime.spawn(async move {
            let _ = token.cancel_query(tls).await;
        });
    }

    /// Runs several statements in one simple-protocol message (the table's
    /// DDL): no parameters, nothing returned.
    pub async fn batch(&self, sql: &str) -> std::result::Result<(), Failure> {
        // Counted on its slot as a statement is: the DDL may wait long (for
        // another process creating the tables), and statements chosen by
        // the fewest on a slot would queue behind it.
        let (slot, pooled, _on_slot) = self.pick().await?;
        let warned_before = pooled.warnings.count();
        match tokio::time::timeout(self.command_timeout.max(Duration::from_secs(10)), pooled.client.batch_execute(sql)).await {
            Ok(Ok(())) => {
                self.health.answered();
                pooled.warnings.since(warned_before).map_or(Ok(()), Err)
            }
            Ok(Err(err)) => Err(classify_statement(err)),
            Err(elapsed) => {
                self.cancel(&pooled);
                slot.forget(&pooled);
                Err(Failure::Unknown(Arc::new(elapsed)))
            }
        }
    }

    /// The slot's client, connecting it first when it has none (or its
    /// connection ended).
    async fn client(&self, slot: &Slot) -> std::result::Result<Arc<Pooled>, Failure> {
        if let Some(client) = slot.live() {
            return Ok(client);
        }
        let attempts = || self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        let seen = attempts().ended;
        let _connecting = slot.connecting.lock().await;
        if let Some(client) = slot.live() {
            return Ok(client);
        }
        let reused = {
            let attempts = attempts();
            attempts
                .failure
                .as_ref()
                .filter(|(at, _)| attempts.ended != seen || at.elapsed() < CONNECT_FAILURE_REUSE)
                .map(|(_, failure)| failure.clone())
        };
        if let Some(failure) = reused {
            return Err(failure);
        }
        let outcome = self.connect(false).await;
        {
            let mut attempts = attempts();
            attempts.ended += 1;
            attempts.failure = outcome.as_ref().err().map(|failure| (Instant::now(), failure.clone()));
        }
        let (client, connection) = match outcome {
            Ok(pair) => pair,
            Err(failure) => {
                self.health.failed(&failure);
                return Err(failure);
            }
        };
        let warnings = Arc::new(Warnings::default());
        self.runtime.spawn(drive(connection, warnings.clone()));
        let pooled = Arc::new(Pooled { client, warnings });
        *slot.client.lock().unwrap_or_else(|e| e.into_inner()) = Some(pooled.clone());
        Ok(pooled)
    }

    /// A new connection for statements, or for `listen`ing, within
    /// `connectTimeoutMs`; its connection task is the caller's to run.
    pub async fn connect(&self, listen: bool) -> std::result::Result<(Client, Connection<Socket, RustlsStream<Socket>>), Failure> {
        let (config, tls, fallback) = if listen {
            (&self.listen_config, &self.listen_tls, &self.listen_tls_fallback)
        } else {
            (&self.config, &self.tls, &self.tls_fallback)
        };
        let attempt = async {
            match (config.connect(tls.clone()).await, fallback) {
                // The server answered, refusing the connection in the clear.
                (Err(err), Some(fallback)) if err.code().is_some() => fallback.connect(tls.clone()).await,
                (outcome, _) => outcome,
            }
        };
        let (failure, timed_out) = match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(pair)) => return Ok(pair),
            Ok(Err(err)) => (self.classify_connect(err), false),
            Err(elapsed) => (Failure::Unreachable(Arc::new(elapsed)), true),
        };
        // tokio-postgres tries the URL's hosts, and a name's addresses, in
        // turn and reports the last one's failure only: a host that took
        // the socket (and refused the login, or answered read-only) before
        // a last one that is down would read as unreachable. Unreachable
        // only when no socket to any of them comes up now either (a second
        // `connectTimeoutMs` at most).
        match failure {
            Failure::Unreachable(cause) if several_places(config) && any_socket_up(config, self.connect_timeout).await => {
                let cause = Arc::new(std::io::Error::other(format!(
                    "a server took a socket at one of the URL's hosts, but no connection was made (the last host tried: {cause})"
                )));
                // Cut by the timeout: a server that took the socket and
                // did not answer in time, as far as anyone can tell.
                Err(if timed_out { Failure::Unanswered(cause) } else { Failure::Refused(cause) })
            }
            failure => Err(failure),
        }
    }

    /// A failure before any statement ran: the server refusing who we are
    /// (the fix names the option, never the password), or unreachable.
    fn classify_connect(&self, err: tokio_postgres::Error) -> Failure {
        let name = option(&self.name);
        let denied = |message: String, fix: String, err: tokio_postgres::Error| {
            Failure::Denied(Arc::new(Refusal { message, fix, cause: Arc::new(err) }))
        };
        match err.code() {
            Some(code) if code.code().starts_with("28") => denied(
                format!("PostgreSQL refused the credentials of {name}"),
                format!("Check the user and password in {name}.url (and the server's pg_hba.conf)."),
                err,
            ),
            Some(&SqlState::INVALID_CATALOG_NAME) => denied(
                format!("the database of {name} does not exist"),
                format!("Create the database or correct the database name in {name}.url."),
                err,
            ),
            Some(_) => Failure::Refused(Arc::new(err)),
            None if tls_error(&err).is_some_and(tls_keys::uncheckable) => denied(
                format!("the TLS certificate of PostgreSQL was refused for {name}: {}", tls_keys::UNCHECKABLE),
                tls_keys::fix("sslmode=require"),
                err,
            ),
            None if refused_certificate(&err) => denied(
                format!("the TLS certificate of PostgreSQL was refused for {name}"),
                format!(
                    "Trust the server's authority (sslrootcert in {name}.url), connect by the name its certificate carries (verify-full), or lower sslmode."
                ),
                err,
            ),
            // The server asked for a password the URL does not have.
            None if err.to_string().contains("password missing") => denied(
                format!("PostgreSQL asks for a password and {name}.url has none"),
                format!("Add the password to {name}.url."),
                err,
            ),
            // A socket that could not be opened, or ended, is unreachable;
            // anything else the server and this client got to (an
            // authentication method or channel binding refused, a TLS alert)
            // is a refusal of a server that is up.
            None if socket_failed(&err) => Failure::Unreachable(Arc::new(err)),
            None => Failure::Refused(Arc::new(err)),
        }
    }

    /// What `status()` reports, and whether releases reach this process.
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Resolves when the connection shuts down.
    pub fn stopped(&self) -> watch::Receiver<bool> {
        self.stopped.subscribe()
    }

    /// Closes every client and stops the listener.
    pub fn shut_down(&self) {
        self.stopped.send_replace(true);
        for slot in &self.slots {
            slot.client.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
        self.health.set_connected(false);
    }
}

impl StoreConnection for PgConnection {
    fn is_notified(&self) -> bool {
        self.health.is_listening()
    }

    fn command_timeout(&self) -> Duration {
        self.command_timeout
    }

    /// True once [`PgConnection::shut_down`] ran.
    fn is_shut_down(&self) -> bool {
        *self.stopped.borrow()
    }

    fn connectivity(&self) -> Connectivity {
        self.health.connectivity()
    }
}

/// The client settings of `url` (`what`: its option), its TLS, and with
/// `sslmode=allow` the same settings with TLS required, for a second try.
fn target(url: &str, what: &str) -> Result<(Config, MakeRustls, Option<Config>)> {
    let (config, settings) = url::config(url, what)?;
    let fallback = settings.allow.then(|| {
        let mut with_tls = config.clone();
        with_tls.ssl_mode(tokio_postgres::config::SslMode::Require);
        with_tls
    });
    Ok((config, MakeRustls::new(&settings, what)?, fallback))
}

/// The option of connection `name`, as messages name it.
fn option(name: &str) -> String {
    format!("dokebi-postgres.connections.{name}")
}

/// True when the TLS handshake failed on the server's certificate (or the
/// server has no TLS while the URL demands it).
fn refused_certificate(err: &tokio_postgres::Error) -> bool {
    matches!(tls_error(err), Some(rustls::Error::InvalidCertificate(_)))
        || error_chain::causes(err).any(|cause| cause.to_string().contains("server does not support TLS"))
}

/// The TLS error under `err`, if any.
fn tls_error(err: &tokio_postgres::Error) -> Option<&rustls::Error> {
    error_chain::find_in_chain(err)
}

/// A failure of a statement that was sent: the server's error (nothing was
/// done: each statement is its own transaction), contention for a key's
/// row among them, or no answer (it may have committed).
fn classify_statement(err: tokio_postgres::Error) -> Failure {
    let Some(db) = err.as_db_error() else { return Failure::Unknown(Arc::new(err)) };
    let code = db.code();
    if session_ended(db) {
        return Failure::Unknown(Arc::new(err));
    }
    // It waited longer than `lock_timeout` for a row another session
    // locks, or was chosen as a deadlock's victim; or it was cancelled
    // (`57014`): by a server `statement_timeout` shorter than our
    // `lock_timeout` (a role's or database's, which a take held up by a
    // row lock meets first), an administrator, or our own cancel of a
    // timed-out statement (it may land on the next one of its client).
    // Nothing was done and the store is up: read as a store that is down,
    // a policy moved a key another lease held there.
    if [SqlState::LOCK_NOT_AVAILABLE, SqlState::T_R_DEADLOCK_DETECTED, SqlState::QUERY_CANCELED].contains(code) {
        return Failure::Contended(Arc::new(err));
    }
    Failure::Refused(Arc::new(err))
}

/// An error that ends the session rather than the statement: an
/// administrator ended it (pg_terminate_backend) or the server is shutting
/// down (57P*), or a pooler gave up on the statement and closes the
/// connection (PgBouncer's `query_timeout`, "server conn crashed?": FATAL
/// 08P01) while the server runs it on. Either way the statement may have
/// committed, or may still. The unlocalized severity where the sender
/// gives one (a server since 9.6), else its own (a pooler's is English).
fn session_ended(db: &tokio_postgres::error::DbError) -> bool {
    let fatal = match db.parsed_severity() {
        Some(severity) => matches!(severity, Severity::Fatal | Severity::Panic),
        None => matches!(db.severity(), "FATAL" | "PANIC"),
    };
    fatal || db.code().code().starts_with("57P")
}

/// True when `err` says the socket never came up (refused, no route, a
/// name that does not resolve, timed out): not an error that is no sign
/// the server is down ([`no_sign_of_down`]: a reset, a full backlog, a
/// permission, which also covers tokio-postgres's own check of a server
/// that answered, `target_session_attrs`: "database does not allow
/// writes", "database is not read only"), nor one from what came through
/// it (a TLS record or alert is `InvalidData`).
fn socket_failed(err: &tokio_postgres::Error) -> bool {
    use std::io::ErrorKind;
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .is_some_and(|io| !no_sign_of_down(io) && !matches!(io.kind(), ErrorKind::InvalidData | ErrorKind::InvalidInput))
}

/// Where a connect of a config opens its sockets, one entry per host.
#[derive(Debug)]
enum Place {
    /// A host name, or an IP address, and the port.
    Tcp(String, u16),
    /// The socket file of a Unix-socket directory (`.s.PGSQL.<port>`).
    #[cfg_attr(not(unix), allow(dead_code))]
    Unix(std::path::PathBuf),
}

/// The places `config`'s connect tries, as tokio-postgres's `connect`
/// picks them: each host's `hostaddr` when given, else the host, on its
/// port (or the only port, or 5432).
fn places(config: &Config) -> Vec<Place> {
    use tokio_postgres::config::Host;
    let (hosts, addrs, ports) = (config.get_hosts(), config.get_hostaddrs(), config.get_ports());
    (0..hosts.len().max(addrs.len()))
        .filter_map(|i| {
            let port = ports.get(i).or_else(|| ports.first()).copied().unwrap_or(5432);
            match (addrs.get(i), hosts.get(i)) {
                (Some(addr), _) => Some(Place::Tcp(addr.to_string(), port)),
                (None, Some(Host::Tcp(host))) => Some(Place::Tcp(host.clone(), port)),
                #[cfg(unix)]
                (None, Some(Host::Unix(dir))) => Some(Place::Unix(dir.join(format!(".s.PGSQL.{port}")))),
                _ => None,
            }
        })
        .collect()
}

/// True when the error of `config`'s connect may not be the only one it
/// met: it names several hosts, or a name that may resolve to several
/// addresses (not an IP address, not a Unix socket).
fn several_places(config: &Config) -> bool {
    let places = places(config);
    places.len() > 1 || places.iter().any(|place| matches!(place, Place::Tcp(host, _) if host.parse::<std::net::IpAddr>().is_err()))
}

/// True when a socket to any of `config`'s places (every address of a
/// name) comes up within `within`: all tried at once, each closed at once.
async fn any_socket_up(config: &Config, within: Duration) -> bool {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let probes: FuturesUnordered<_> = places(config)
        .into_iter()
        .map(|place| async move {
            match place {
                Place::Tcp(host, port) => match tokio::net::lookup_host((host.as_str(), port)).await {
                    Ok(addrs) => any_address_up(addrs.collect()).await,
                    Err(_) => false,
                },
                #[cfg(unix)]
                Place::Unix(path) => tokio::net::UnixStream::connect(path).await.map_or_else(|err| no_sign_of_down(&err), |_| true),
                #[cfg(not(unix))]
                Place::Unix(_) => false,
            }
        })
        .collect();
    let mut up = probes.filter(|up| std::future::ready(*up));
    matches!(tokio::time::timeout(within, up.next()).await, Ok(Some(true)))
}

/// True when a TCP socket to any of `addrs` comes up (all tried at once),
/// even if it is reset at once.
async fn any_address_up(addrs: Vec<std::net::SocketAddr>) -> bool {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let probes: FuturesUnordered<_> = addrs
        .into_iter()
        .map(|addr| async move { tokio::net::TcpStream::connect(addr).await.map_or_else(|err| no_sign_of_down(&err), |_| true) })
        .collect();
    let mut up = probes.filter(|up| std::future::ready(*up));
    up.next().await.is_some()
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    /// A port nothing listens on.
    fn dead_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
    }

    fn config(url: &str) -> Config {
        Config::from_str(url).unwrap()
    }

    #[test]
    fn only_several_hosts_or_a_name_are_probed() {
        assert!(!several_places(&config("postgres://u@127.0.0.1:5432/db")));
        assert!(!several_places(&config("postgres://u@[::1]:5432/db")));
        assert!(!several_places(&config("host=/var/run/postgresql user=u")));
        assert!(!several_places(&config("host=localhost hostaddr=127.0.0.1 user=u")));
        assert!(several_places(&config("postgres://u@localhost/db")));
        assert!(several_places(&config("postgres://u@127.0.0.1,127.0.0.2/db")));
        assert!(several_places(&config("host=/var/run/postgresql,/tmp user=u")));
    }

    #[test]
    fn places_follow_tokio_postgres() {
        let listed = format!("{:?}", places(&config("host=a,b,c hostaddr=10.0.0.1,10.0.0.2,10.0.0.3 port=1,2,3 user=u")));
        assert_eq!(listed, r#"[Tcp("10.0.0.1", 1), Tcp("10.0.0.2", 2), Tcp("10.0.0.3", 3)]"#);
        let listed = format!("{:?}", places(&config("postgres://u@a,b:7/db")));
        assert_eq!(listed, r#"[Tcp("a", 5432), Tcp("b", 7)]"#);
    }

    /// The addresses of one name (tokio-postgres tries them in turn and
    /// keeps the last one's error): any one that takes the socket counts,
    /// first or last.
    #[tokio::test]
    async fn any_address_of_a_name_that_takes_the_socket_is_up() {
        let up = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = up.local_addr().unwrap();
        let dead = std::net::SocketAddr::from(([127, 0, 0, 1], dead_port()));
        assert!(any_address_up(vec![up, dead]).await);
        assert!(any_address_up(vec![dead, up]).await);
        assert!(!any_address_up(vec![dead]).await);
        assert!(!any_address_up(vec![]).await);
    }

    #[tokio::test]
    async fn a_host_that_takes_the_socket_is_up_whichever_its_place() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let up = listener.local_addr().unwrap().port();
        let (dead, other) = (dead_port(), dead_port());
        let within = Duration::from_secs(2);
        assert!(any_socket_up(&config(&format!("postgres://u@localhost:{up}/db")), within).await);
        assert!(any_socket_up(&config(&format!("postgres://u@127.0.0.1:{up},127.0.0.1:{dead}/db")), within).await);
        assert!(any_socket_up(&config(&format!("postgres://u@127.0.0.1:{dead},localhost:{up}/db")), within).await);
        assert!(!any_socket_up(&config(&format!("postgres://u@127.0.0.1:{dead},localhost:{other}/db")), within).await);
        assert!(!any_socket_up(&config(&format!("postgres://u@no-such-host.invalid:{up}/db")), within).await);
    }
}
