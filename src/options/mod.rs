//! Loading and validating the options.
//!
//! Three ways in, one validator: the whole YAML file (`schemaVersion: 1`,
//! `options: …`), the already-parsed `options` map, or the plugin sections
//! given separately (what a dokebi host passes to `createPlugin`). Validation
//! collects every problem before failing, so a user fixes a file in one pass.

pub mod declaration;
mod scan;
pub mod yaml;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::error::{ErrorCode, Issue, LockError, Result};
use crate::holder::HolderLabel;
use crate::policy::{OnUnavailable, Pattern, Tier};
use declaration::{
    Fallback, Field, Kind, CLUSTER_FIELDS, CONNECTION_FIELDS, DEFAULT_RULE_FIELDS, ENDPOINT_FIELDS, FILE_FIELDS, LOCAL_FIELDS,
    MYSQL_CONNECTION_FIELDS, MYSQL_FIELDS, PATTERN_FIELDS, POLICY_FIELDS, POSTGRES_CONNECTION_FIELDS, POSTGRES_FIELDS, REDIS_FIELDS,
    RULE_FIELDS, SENTINEL_FIELDS, TLS_FIELDS,
};

/// The name of this plugin's section in the `options` map.
pub const LOCK_SECTION: &str = "dokebi-lock";
/// The name of the Redis connections' section in the `options` map.
pub const REDIS_SECTION: &str = "dokebi-redis";
/// The name of the PostgreSQL connections' section in the `options` map.
pub const POSTGRES_SECTION: &str = "dokebi-postgres";
/// The name of the MySQL connections' section in the `options` map.
pub const MYSQL_SECTION: &str = "dokebi-mysql";

/// Validated options: every backend and every Redis connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Every backend, by name (`dokebi-lock.backends`).
    pub backends: BTreeMap<String, BackendOptions>,
    /// Every Redis connection, by name (`dokebi-redis.connections`).
    pub connections: BTreeMap<String, ConnectionOptions>,
    /// Every PostgreSQL connection, by name (`dokebi-postgres.connections`).
    pub postgres: BTreeMap<String, PostgresConnectionOptions>,
    /// Every MySQL connection, by name (`dokebi-mysql.connections`).
    pub mysql: BTreeMap<String, MysqlConnectionOptions>,
    /// `dokebi-lock.holder`: the label of this provider's holders in
    /// `inspect` and in a `WAIT_TIMEOUT` or `LOCK_BUSY` (this host's name
    /// and pid when not given).
    pub holder: HolderLabel,
}

/// One backend, by driver.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendOptions {
    /// A `driver: local` backend: an in-process FIFO mutex.
    Local(LocalOptions),
    /// A `driver: redis` backend: a Redis lease.
    Redis(StoreOptions),
    /// A `driver: postgres` backend: a lease row in PostgreSQL.
    Postgres(PostgresOptions),
    /// A `driver: mysql` backend: a lease row in MySQL or MariaDB.
    Mysql(MysqlOptions),
    /// A `driver: file` backend: kernel file locks shared by the processes
    /// of one host.
    File(FileOptions),
    /// A `driver: policy` backend: other backends of these options, chosen
    /// per key by rules.
    Policy(PolicyOptions),
    /// A driver the core does not implement (an app driver of the Node
    /// surface). Its settings are passed through to that driver unvalidated.
    App {
        /// The driver name.
        driver: String,
        /// The backend's settings, as written.
        settings: Map<String, Value>,
    },
}

impl BackendOptions {
    /// The driver name as written in the options.
    pub fn driver(&self) -> &str {
        match self {
            BackendOptions::Local(_) => "local",
            BackendOptions::Redis(_) => "redis",
            BackendOptions::Postgres(_) => "postgres",
            BackendOptions::Mysql(_) => "mysql",
            BackendOptions::File(_) => "file",
            BackendOptions::Policy(_) => "policy",
            BackendOptions::App { driver, .. } => driver,
        }
    }
}

/// Telemetry thresholds of a backend; `None` disables that report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// `slowAcquireMs`: report an acquire that waited at least this long.
    pub slow_acquire_ms: Option<u32>,
    /// `slowHoldMs`: report a lease held at least this long.
    pub slow_hold_ms: Option<u32>,
}

impl Thresholds {
    fn from_fields(fields: &Fields) -> Self {
        Thresholds { slow_acquire_ms: fields.threshold("slowAcquireMs"), slow_hold_ms: fields.threshold("slowHoldMs") }
    }
}

/// Options of a `driver: local` backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalOptions {
    /// `maxKeys`: keys held at once; one more is `KEY_LIMIT`.
    pub max_keys: u32,
    /// `maxWaiters`: waiters across the backend; one more is `QUEUE_FULL`.
    pub max_waiters: u32,
    /// `waitTimeoutMs`: the default wait before `WAIT_TIMEOUT`; 0 tries once.
    pub wait_timeout_ms: u32,
    /// `maxKeyBytes`: the largest key, in UTF-8 bytes.
    pub max_key_bytes: u32,
    /// `slowAcquireMs` and `slowHoldMs`.
    pub thresholds: Thresholds,
}

impl Default for LocalOptions {
    fn default() -> Self {
        let fields = Fields::defaults(LOCAL_FIELDS);
        LocalOptions::from_fields(&fields)
    }
}

impl LocalOptions {
    fn from_fields(fields: &Fields) -> Self {
        LocalOptions {
            max_keys: fields.int("maxKeys"),
            max_waiters: fields.int("maxWaiters"),
            wait_timeout_ms: fields.int("waitTimeoutMs"),
            max_key_bytes: fields.int("maxKeyBytes"),
            thresholds: Thresholds::from_fields(fields),
        }
    }
}

/// Options of a backend whose leases live in a store (`driver: redis`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreOptions {
    /// `connection`: the name of a connection in `dokebi-redis.connections`.
    pub connection: String,
    /// `namespace`: the prefix of every Redis key this backend writes.
    pub namespace: String,
    /// `leaseMs`: a lease not renewed or released expires after this long.
    pub lease_ms: u32,
    /// `waitTimeoutMs`: the default wait before `WAIT_TIMEOUT`; 0 tries once.
    pub wait_timeout_ms: u32,
    /// `pollIntervalMs`: a waiter's retry interval while release notifications are down.
    pub poll_interval_ms: u32,
    /// `notifyPollIntervalMs`: a waiter's safety-net retry interval while notifications are live.
    pub notify_poll_interval_ms: u32,
    /// `maxWaiters`: acquires in progress in this process; one more is `QUEUE_FULL`.
    pub max_waiters: u32,
    /// `maxLeases`: leases held by this process; one more is `KEY_LIMIT`.
    pub max_leases: u32,
    /// `maxKeyBytes`: the largest key, in UTF-8 bytes.
    pub max_key_bytes: u32,
    /// `shutdownTimeoutMs`: how long `close()` spends releasing held leases.
    pub shutdown_timeout_ms: u32,
    /// Replicas that must acknowledge each acquire and renew (`WAIT`).
    pub replica_acks: u32,
    /// `fenceRetentionMs`: how long a key's fence counter stays in Redis
    /// after the key's last grant. Fences never repeat as long as no server
    /// that can become primary has a clock further behind than this.
    pub fence_retention_ms: u32,
    /// `slowAcquireMs` and `slowHoldMs`.
    pub thresholds: Thresholds,
}

impl StoreOptions {
    /// The lock layer's options of a redis or postgres backend (a postgres
    /// backend has no `replicaAcks`: 0).
    fn from_fields(fields: &Fields) -> Self {
        StoreOptions {
            connection: fields.text("connection"),
            namespace: fields.text("namespace"),
            lease_ms: fields.int("leaseMs"),
            wait_timeout_ms: fields.int("waitTimeoutMs"),
            poll_interval_ms: fields.int("pollIntervalMs"),
            notify_poll_interval_ms: fields.int("notifyPollIntervalMs"),
            max_waiters: fields.int("maxWaiters"),
            max_leases: fields.int("maxLeases"),
            max_key_bytes: fields.int("maxKeyBytes"),
            shutdown_timeout_ms: fields.int("shutdownTimeoutMs"),
            replica_acks: if fields.has("replicaAcks") { fields.int("replicaAcks") } else { 0 },
            fence_retention_ms: fields.int("fenceRetentionMs"),
            thresholds: Thresholds::from_fields(fields),
        }
    }
}

/// Options of a `driver: postgres` backend: the lock layer's, and where
/// its tables are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The options every store-backed backend shares (`connection` names
    /// one of `dokebi-postgres.connections`).
    pub store: StoreOptions,
    /// `schema`: the schema of the lock tables.
    pub schema: String,
    /// `table`: the key table's name, and the prefix of the others'.
    pub table: String,
    /// `autoCreate`: create missing tables and functions on first use.
    pub auto_create: bool,
}

impl PostgresOptions {
    fn from_fields(fields: &Fields) -> Self {
        PostgresOptions {
            store: StoreOptions::from_fields(fields),
            schema: fields.text("schema"),
            table: fields.text("table"),
            auto_create: fields.boolean("autoCreate"),
        }
    }
}

/// A PostgreSQL connection under `dokebi-postgres.connections.<name>`. Its
/// `Debug` never shows a password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConnectionOptions {
    /// `url`: where the lock statements go (a pooler is fine).
    pub url: String,
    /// `listenUrl`: a direct connection for `LISTEN`; `None` uses `url`.
    pub listen_url: Option<String>,
    /// `connectTimeoutMs`: the bound on establishing a connection.
    pub connect_timeout_ms: u32,
    /// `commandTimeoutMs`: the bound on one statement.
    pub command_timeout_ms: u32,
    /// `poolSize`: connections for lock statements.
    pub pool_size: u32,
}

impl std::fmt::Debug for PostgresConnectionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresConnectionOptions")
            .field("url", &redact(&self.url))
            .field("listen_url", &self.listen_url.as_deref().map(redact))
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// Options of a `driver: mysql` backend: the lock layer's, and where its
/// tables are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlOptions {
    /// The options every store-backed backend shares (`connection` names
    /// one of `dokebi-mysql.connections`).
    pub store: StoreOptions,
    /// `table`: the key table's name, and the prefix of the others'.
    pub table: String,
    /// `autoCreate`: create missing tables and procedures on first use.
    pub auto_create: bool,
}

/// The endings of the names the postgres driver gives what it makes beside
/// its key table `<table>` (src/postgres/schema.rs): the holders and
/// waiting tables, the key table's index on `fence_until`, and the primary
/// keys' indexes (PostgreSQL names them `<relation>_pkey`). Every relation
/// name of two tables `t` and `u` differs unless one of them ends so: a
/// table `t_holders` beside a table `t` would be its holders table.
const POSTGRES_MADE_BESIDE: &[&str] = &["_holders", "_waiting", "_fence_until", "_pkey"];

/// The endings of the tables the mysql driver makes beside its key table
/// (src/mysql/schema.rs; MySQL names indexes per table).
const MYSQL_MADE_BESIDE: &[&str] = &["_holders", "_waiting", "_released"];

impl MysqlOptions {
    fn from_fields(fields: &Fields) -> Self {
        MysqlOptions { store: StoreOptions::from_fields(fields), table: fields.text("table"), auto_create: fields.boolean("autoCreate") }
    }
}

/// A MySQL connection under `dokebi-mysql.connections.<name>`. Its `Debug`
/// never shows a password.
#[derive(Clone, PartialEq, Eq)]
pub struct MysqlConnectionOptions {
    /// `url`: where the lock statements go.
    pub url: String,
    /// `connectTimeoutMs`: the bound on establishing a connection.
    pub connect_timeout_ms: u32,
    /// `commandTimeoutMs`: the bound on one statement.
    pub command_timeout_ms: u32,
    /// `poolSize`: connections for lock statements.
    pub pool_size: u32,
}

impl std::fmt::Debug for MysqlConnectionOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MysqlConnectionOptions")
            .field("url", &redact(&self.url))
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("command_timeout_ms", &self.command_timeout_ms)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

/// Options of a `driver: file` backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileOptions {
    /// `directory`: where the lock files live.
    pub directory: String,
    /// `namespace`: part of every lock file's name, so backends of one
    /// directory with different namespaces never share a key.
    pub namespace: String,
    /// `maxKeys`: leases held at once by this process; one more is `KEY_LIMIT`.
    pub max_keys: u32,
    /// `maxWaiters`: waiters of this process; one more is `QUEUE_FULL`.
    pub max_waiters: u32,
    /// `waitTimeoutMs`: the default wait before `WAIT_TIMEOUT`; 0 tries once.
    pub wait_timeout_ms: u32,
    /// `maxKeyBytes`: the largest key, in UTF-8 bytes.
    pub max_key_bytes: u32,
    /// `pollIntervalMs`: the waiters' safety-net retry interval.
    pub poll_interval_ms: u32,
    /// `slowAcquireMs` and `slowHoldMs`.
    pub thresholds: Thresholds,
}

impl FileOptions {
    fn from_fields(fields: &Fields) -> Self {
        FileOptions {
            directory: fields.text("directory"),
            namespace: fields.text("namespace"),
            max_keys: fields.int("maxKeys"),
            max_waiters: fields.int("maxWaiters"),
            wait_timeout_ms: fields.int("waitTimeoutMs"),
            max_key_bytes: fields.int("maxKeyBytes"),
            poll_interval_ms: fields.int("pollIntervalMs"),
            thresholds: Thresholds::from_fields(fields),
        }
    }
}

/// A `driver: policy` backend (see `src/policy/`).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyOptions {
    /// Rules by key, the first that matches decides.
    pub rules: Vec<RuleOptions>,
    /// The rule of the keys no entry of `rules` takes (its `pattern` is `None`).
    pub default: RuleOptions,
    /// Default wait, across every member tried.
    pub wait_timeout_ms: u32,
    /// How long a member found unavailable is passed over.
    pub reprobe_cooldown_ms: u32,
}

/// One rule of a policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleOptions {
    /// The keys it takes; `None` for the default rule.
    pub pattern: Option<Pattern>,
    /// The member backends that may serve them, preferred first.
    pub backends: Vec<String>,
    /// The lowest tier that may serve them (the first member's when the
    /// options leave it out).
    pub min_tier: Tier,
    /// What happens while the first member cannot serve.
    pub on_unavailable: OnUnavailable,
}

impl RuleOptions {
    /// A rule as read; its minimum tier is settled by [`settle_policy`]
    /// once every backend's tier is known.
    fn from_fields(fields: &Fields) -> Self {
        let pattern = match (fields.optional_text("prefix"), fields.optional_text("glob")) {
            (Some(prefix), _) => Some(Pattern::Prefix(prefix)),
            (None, Some(glob)) => Some(Pattern::Glob(glob)),
            (None, None) => None,
        };
        RuleOptions {
            pattern,
            backends: fields.texts("backends"),
            min_tier: fields.optional_text("minTier").and_then(|name| Tier::from_name(&name)).unwrap_or(Tier::Process),
            on_unavailable: OnUnavailable::from_name(&fields.text("onUnavailable")).expect("validated choice"),
        }
    }
}

impl PolicyOptions {
    fn from_fields(fields: &Fields) -> Self {
        let rules =
            fields.0.get("rules").and_then(Value::as_array).map_or_else(Vec::new, |list| {
                list.iter().map(|rule| RuleOptions::from_fields(&Fields::of_table(rule, RULE_FIELDS))).collect()
            });
        PolicyOptions {
            rules,
            default: RuleOptions::from_fields(&fields.table("default", DEFAULT_RULE_FIELDS)),
            wait_timeout_ms: fields.int("waitTimeoutMs"),
            reprobe_cooldown_ms: fields.int("reprobeCooldownMs"),
        }
    }
}

/// A Redis connection under `dokebi-redis.connections.<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionOptions {
    /// Where Redis is.
    pub endpoint: Endpoint,
    /// `connectTimeoutMs`: the bound on establishing a connection.
    pub connect_timeout_ms: u32,
    /// `commandTimeoutMs`: the bound on one command; past it the outcome is unknown.
    pub command_timeout_ms: u32,
    /// `tls`: how its TLS links verify the server and prove the client.
    pub tls: Option<TlsOptions>,
}

/// `connections.<name>.tls`: applies to every TLS link of the connection
/// (a `rediss://` server or cluster node, the sentinels of `rediss://`
/// URLs, the primary of `sentinel.tls`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// `ca` / `caFile`: the authorities trusted for this connection, in
    /// place of the system's.
    pub ca: Option<Pem>,
    /// `cert` / `certFile`: the client certificate (chain), for mutual TLS.
    pub cert: Option<Pem>,
    /// `key` / `keyFile`: the client certificate's private key.
    pub key: Option<Pem>,
    /// `servername`: the name the server's certificate must carry, when
    /// not the host of the URL.
    pub servername: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Endpoint::Server { url } => f.debug_struct("Server").field("url", &redact(url)).finish(),
            Endpoint::Sentinel(sentinel) => f.debug_tuple("Sentinel").field(sentinel).finish(),
            Endpoint::Cluster { nodes } => {
                f.debug_struct("Cluster").field("nodes", &nodes.iter().map(|url| redact(url)).collect::<Vec<_>>()).finish()
            }
        }
    }
}

/// `url` with the password of its user part (`scheme://user:password@`)
/// replaced, for `Debug`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    match rest.split_once('@') {
        Some((user, host)) if user.contains(':') => {
            let user = user.split_once(':').map_or(user, |(user, _)| user);
            format!("{scheme}://{user}:<redacted>@{host}")
        }
        _ => url.to_owned(),
    }
}

impl std::fmt::Debug for SentinelOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelOptions")
            .field("nodes", &self.nodes.iter().map(|url| redact(url)).collect::<Vec<_>>())
            .field("primary_name", &self.primary_name)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("db", &self.db)
            .field("tls", &self.tls)
            .finish()
    }
}

/// A PEM setting: the text itself, or the path of a file holding it (read
/// when the provider opens). Its `Debug` never shows the text: it may be a
/// private key.
#[derive(Clone, PartialEq, Eq)]
pub enum Pem {
    /// PEM text (`-----BEGIN ...`).
    Text(String),
    /// The path of a PEM file.
    File(String),
}

impl std::fmt::Debug for Pem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pem::Text(text) => write!(f, "Text(<{} bytes>)", text.len()),
            Pem::File(path) => f.debug_tuple("File").field(path).finish(),
        }
    }
}

/// Where a connection finds Redis: exactly one of `url`, `sentinel`,
/// `cluster`. Its `Debug` never shows a password.
#[derive(Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// One server.
    Server {
        /// `redis://`, `rediss://` (TLS) or `unix://` URL of the server.
        url: String,
    },
    /// The primary that the sentinels name, followed across failovers.
    Sentinel(SentinelOptions),
    /// A Redis Cluster, found through its seed nodes.
    Cluster {
        /// The seed nodes' `redis://` or `rediss://` URLs.
        nodes: Vec<String>,
    },
}

/// `connections.<name>.sentinel`. Its `Debug` never shows the password.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelOptions {
    /// Sentinel URLs (their credentials are the sentinels').
    pub nodes: Vec<String>,
    /// `primaryName`: the name the sentinels monitor the primary under.
    pub primary_name: String,
    /// Credentials, database and TLS of the primary.
    pub username: Option<String>,
    /// Password on the primary, if any.
    pub password: Option<String>,
    /// Database number on the primary.
    pub db: u32,
    /// Connect to the primary over TLS.
    pub tls: bool,
}

impl Options {
    /// Loads the whole YAML file: `schemaVersion: 1` and an `options` map.
    /// Hostile text (huge, deeply nested, an alias bomb, duplicated keys) is
    /// `INVALID_OPTIONS` too, found in time linear in its length; see [`yaml`].
    pub fn from_yaml(text: &str) -> Result<Options> {
        Options::from_document(&yaml::parse(text)?)
    }

    /// Loads an already-parsed file (the YAML file as a JSON value).
    pub fn from_document(document: &Value) -> Result<Options> {
        let mut issues = Issues::default();
        let Some(root) = document.as_object() else {
            return Err(LockError::invalid_options(vec![issue("", "expected a mapping with schemaVersion and options")]));
        };
        match root.get("schemaVersion") {
            Some(version) if version.as_u64() == Some(1) => {}
            Some(_) => issues.push("schemaVersion", "must be 1"),
            None => issues.push("schemaVersion", "is required (schemaVersion: 1)"),
        }
        for name in root.keys().filter(|k| *k != "schemaVersion" && *k != "options") {
            issues.push(name, "unknown field");
        }
        let options = match root.get("options") {
            Some(options) => options.clone(),
            None => {
                issues.push("options", "is required");
                Value::Object(Map::new())
            }
        };
        Options::validate_config(&options, issues)
    }

    /// Loads the parsed `options` map (keys `dokebi-lock`, `dokebi-redis`,
    /// `dokebi-postgres`, `dokebi-mysql`; other plugins' sections are ignored).
    pub fn from_config(options: &Value) -> Result<Options> {
        Options::validate_config(options, Issues::default())
    }

    /// Loads the plugin sections given separately (`dokebi-lock`,
    /// `dokebi-redis`, `dokebi-postgres`, `dokebi-mysql`); any may be absent.
    pub fn from_sections(lock: Option<&Value>, redis: Option<&Value>, postgres: Option<&Value>, mysql: Option<&Value>) -> Result<Options> {
        let sections = [(LOCK_SECTION, lock), (REDIS_SECTION, redis), (POSTGRES_SECTION, postgres), (MYSQL_SECTION, mysql)];
        let map: Map<String, Value> =
            sections.into_iter().filter_map(|(name, section)| Some((name.to_owned(), section?.clone()))).collect();
        Options::from_config(&Value::Object(map))
    }

    fn validate_config(options: &Value, mut issues: Issues) -> Result<Options> {
        let empty = Map::new();
        let root = match options {
            Value::Object(map) => map,
            _ => {
                issues.push("options", "expected a mapping");
                &empty
            }
        };
        let connections = parse_connections(root.get(REDIS_SECTION), &mut issues);
        let postgres = parse_postgres_connections(root.get(POSTGRES_SECTION), &mut issues);
        let mysql = parse_mysql_connections(root.get(MYSQL_SECTION), &mut issues);
        let mut backends = parse_backends(root.get(LOCK_SECTION), &mut issues);
        let holder = parse_holder(root.get(LOCK_SECTION), &mut issues);
        let tiers: BTreeMap<String, Option<Tier>> = backends.iter().map(|(name, backend)| (name.clone(), Tier::of(backend))).collect();
        for (name, backend) in backends.iter_mut() {
            if let BackendOptions::Policy(policy) = backend {
                let given = root.get(LOCK_SECTION).and_then(|lock| lock.get("backends")?.get(name)).unwrap_or(&Value::Null);
                settle_policy(name, policy, &tiers, given, &mut issues);
            }
        }
        for (name, backend) in &backends {
            let (table, made_beside) = match backend {
                BackendOptions::Postgres(postgres) => (&postgres.table, POSTGRES_MADE_BESIDE),
                BackendOptions::Mysql(mysql) => (&mysql.table, MYSQL_MADE_BESIDE),
                _ => continue,
            };
            if made_beside.iter().any(|suffix| table.ends_with(suffix)) {
                issues.push(
                    format!("backends.{name}.table"),
                    format!(
                        "must not end with {}: the tables (and indexes) made beside a table are named after it so, and another backend's table of that name would be one of them",
                        made_beside.join(", ")
                    ),
                );
            }
        }

        let mut unknown_connections = Issues::default();
        for (name, backend) in &backends {
            let (redis, command_timeout_ms, section) = match backend {
                BackendOptions::Redis(redis) => {
                    (redis, connections.get(&redis.connection).map(|connection| connection.command_timeout_ms), REDIS_SECTION)
                }
                BackendOptions::Postgres(postgres_backend) => {
                    let store = &postgres_backend.store;
                    (store, postgres.get(&store.connection).map(|connection| connection.command_timeout_ms), POSTGRES_SECTION)
                }
                BackendOptions::Mysql(mysql_backend) => {
                    let store = &mysql_backend.store;
                    (store, mysql.get(&store.connection).map(|connection| connection.command_timeout_ms), MYSQL_SECTION)
                }
                _ => continue,
            };
            {
                match command_timeout_ms {
                    None => unknown_connections.0.push(
                        Issue::new(format!("backends.{name}.connection"), format!("names no connection under {section}.connections"))
                            .with_code(ErrorCode::UnknownConnection),
                    ),
                    // A command may take up to commandTimeoutMs; one that
                    // may outlast the lease could return a grant already
                    // expired, or learn of a loss only after it happened.
                    Some(command_timeout_ms) if command_timeout_ms >= redis.lease_ms => issues.push(
                        format!("backends.{name}.leaseMs"),
                        format!(
                            "must be above the commandTimeoutMs ({command_timeout_ms}) of connections.{}; raise leaseMs or lower commandTimeoutMs",
                            redis.connection
                        ),
                    ),
                    Some(_) => {}
                }
            }
        }
        if issues.0.is_empty() && !unknown_connections.0.is_empty() {
            let first = &unknown_connections.0[0];
            return Err(LockError::new(ErrorCode::UnknownConnection, first.to_string())
                .with_details(serde_json::json!({ "issues": unknown_connections.0 })));
        }
        issues.0.extend(unknown_connections.0);
        if !issues.0.is_empty() {
            return Err(LockError::invalid_options(issues.0));
        }
        Ok(Options { backends, connections, postgres, mysql, holder })
    }
}

fn parse_connections(section: Option<&Value>, issues: &mut Issues) -> BTreeMap<String, ConnectionOptions> {
    let mut connections = BTreeMap::new();
    let Some(section) = mapping(section, REDIS_SECTION, issues) else { return connections };
    for name in section.keys().filter(|k| *k != "connections") {
        issues.push(name, "unknown field");
    }
    let Some(list) = mapping(section.get("connections"), "connections", issues) else { return connections };
    for (name, value) in list {
        let path = format!("connections.{name}");
        let Some(map) = mapping(Some(value), &path, issues) else { continue };
        if let Some(fields) = Fields::read(map, CONNECTION_FIELDS, &path, issues) {
            let given: Vec<&str> = ENDPOINT_FIELDS.into_iter().filter(|name| fields.has(name)).collect();
            let endpoint = match given.as_slice() {
                ["url"] => Endpoint::Server { url: fields.text("url") },
                ["sentinel"] => {
                    let sentinel = fields.table("sentinel", SENTINEL_FIELDS);
                    Endpoint::Sentinel(SentinelOptions {
                        nodes: sentinel.texts("nodes"),
                        primary_name: sentinel.text("primaryName"),
                        username: sentinel.optional_text("username"),
                        password: sentinel.optional_text("password"),
                        db: sentinel.int("db"),
                        tls: sentinel.boolean("tls"),
                    })
                }
                ["cluster"] => Endpoint::Cluster { nodes: fields.table("cluster", CLUSTER_FIELDS).texts("nodes") },
                [] => {
                    issues.push(path, "needs one of url (one server), sentinel or cluster");
                    continue;
                }
                _ => {
                    issues.push(path, format!("has {}: give exactly one of url, sentinel and cluster", given.join(" and ")));
                    continue;
                }
            };
            let tls = match fields.has("tls") {
                true => match tls_options(&fields.table("tls", TLS_FIELDS), &endpoint, &format!("{path}.tls"), issues) {
                    Some(tls) => Some(tls),
                    None => continue,
                },
                false => None,
            };
            connections.insert(
                name.clone(),
                ConnectionOptions {
                    endpoint,
                    connect_timeout_ms: fields.int("connectTimeoutMs"),
                    command_timeout_ms: fields.int("commandTimeoutMs"),
                    tls,
                },
            );
        }
    }
    connections
}

fn parse_postgres_connections(section: Option<&Value>, issues: &mut Issues) -> BTreeMap<String, PostgresConnectionOptions> {
    let mut connections = BTreeMap::new();
    let Some(section) = mapping(section, POSTGRES_SECTION, issues) else { return connections };
    for name in section.keys().filter(|k| *k != "connections") {
        issues.push(format!("{POSTGRES_SECTION}.{name}"), "unknown field");
    }
    let Some(list) = mapping(section.get("connections"), "connections", issues) else { return connections };
    for (name, value) in list {
        let path = format!("{POSTGRES_SECTION}.connections.{name}");
        let Some(map) = mapping(Some(value), &path, issues) else { continue };
        if let Some(fields) = Fields::read(map, POSTGRES_CONNECTION_FIELDS, &path, issues) {
            connections.insert(
                name.clone(),
                PostgresConnectionOptions {
                    url: fields.text("url"),
                    listen_url: fields.optional_text("listenUrl"),
                    connect_timeout_ms: fields.int("connectTimeoutMs"),
                    command_timeout_ms: fields.int("commandTimeoutMs"),
                    pool_size: fields.int("poolSize"),
                },
            );
        }
    }
    connections
}

fn parse_mysql_connections(section: Option<&Value>, issues: &mut Issues) -> BTreeMap<String, MysqlConnectionOptions> {
    let mut connections = BTreeMap::new();
    let Some(section) = mapping(section, MYSQL_SECTION, issues) else { return connections };
    for name in section.keys().filter(|k| *k != "connections") {
        issues.push(format!("{MYSQL_SECTION}.{name}"), "unknown field");
    }
    let Some(list) = mapping(section.get("connections"), "connections", issues) else { return connections };
    for (name, value) in list {
        let path = format!("{MYSQL_SECTION}.connections.{name}");
        let Some(map) = mapping(Some(value), &path, issues) else { continue };
        if let Some(fields) = Fields::read(map, MYSQL_CONNECTION_FIELDS, &path, issues) {
            connections.insert(
                name.clone(),
                MysqlConnectionOptions {
                    url: fields.text("url"),
                    connect_timeout_ms: fields.int("connectTimeoutMs"),
                    command_timeout_ms: fields.int("commandTimeoutMs"),
                    pool_size: fields.int("poolSize"),
                },
            );
        }
    }
    connections
}

/// `connections.<name>.tls`; `None` (with the issues recorded) when its
/// fields contradict each other or the connection has no TLS link.
fn tls_options(fields: &Fields, endpoint: &Endpoint, path: &str, issues: &mut Issues) -> Option<TlsOptions> {
    let before = issues.0.len();
    let mut pem = |text: &str, file: &str| match (fields.optional_text(text), fields.optional_text(file)) {
        (Some(_), Some(_)) => {
            issues.push(path, format!("give {text} or {file}, not both"));
            None
        }
        (Some(pem), None) if !pem.contains("-----BEGIN ") => {
            issues.push(format!("{path}.{text}"), format!("expected PEM text (-----BEGIN ...); give a file's path as {file}"));
            None
        }
        (Some(pem), None) => Some(Pem::Text(pem)),
        (None, Some(file)) => Some(Pem::File(file)),
        (None, None) => None,
    };
    let tls = TlsOptions {
        ca: pem("ca", "caFile"),
        cert: pem("cert", "certFile"),
        key: pem("key", "keyFile"),
        servername: fields.optional_text("servername"),
    };
    if fields.has("cert") || fields.has("certFile") {
        if !(fields.has("key") || fields.has("keyFile")) {
            issues.push(path, "cert needs its private key: give key or keyFile too");
        }
    } else if fields.has("key") || fields.has("keyFile") {
        issues.push(path, "key needs its certificate: give cert or certFile too");
    }
    let tls_url = |url: &String| url.starts_with("rediss://");
    let has_tls_link = match endpoint {
        Endpoint::Server { url } => tls_url(url),
        Endpoint::Sentinel(sentinel) => sentinel.tls || sentinel.nodes.iter().any(tls_url),
        Endpoint::Cluster { nodes } => nodes.iter().any(tls_url),
    };
    if !has_tls_link {
        issues.push(path, "applies to TLS links only, and this connection has none: use rediss:// URLs (or sentinel.tls: true)");
    }
    (issues.0.len() == before).then_some(tls)
}

/// `dokebi-lock.holder`, checked; this process's label when absent.
fn parse_holder(section: Option<&Value>, issues: &mut Issues) -> HolderLabel {
    match section.and_then(|section| section.get("holder")) {
        None | Some(Value::Null) => HolderLabel::of_this_process(),
        Some(Value::String(label)) => HolderLabel::new(label).unwrap_or_else(|problem| {
            issues.push("holder", problem);
            HolderLabel::of_this_process()
        }),
        Some(_) => {
            issues.push("holder", "must be a string");
            HolderLabel::of_this_process()
        }
    }
}

fn parse_backends(section: Option<&Value>, issues: &mut Issues) -> BTreeMap<String, BackendOptions> {
    let mut backends = BTreeMap::new();
    let Some(section) = mapping(section, LOCK_SECTION, issues) else { return backends };
    for name in section.keys().filter(|k| *k != "backends" && *k != "holder") {
        issues.push(name, "unknown field");
    }
    let Some(list) = mapping(section.get("backends"), "backends", issues) else { return backends };
    for (name, value) in list {
        let path = format!("backends.{name}");
        // `jobs:` with nothing after it is YAML null: a backend with every default.
        let empty = Map::new();
        let map = match value {
            Value::Null => &empty,
            other => match mapping(Some(other), &path, issues) {
                Some(map) => map,
                None => continue,
            },
        };
        let driver = match map.get("driver") {
            None | Some(Value::Null) => "local",
            Some(Value::String(driver)) if !driver.is_empty() => driver.as_str(),
            Some(_) => {
                issues.push(
                    format!("{path}.driver"),
                    "must be a non-empty string (local, redis, postgres, mysql, file, policy, or an app driver)",
                );
                continue;
            }
        };
        if !compiled_in(driver) {
            issues.0.push(not_compiled_in(name, driver));
            continue;
        }
        let mut settings = map.clone();
        settings.remove("driver");
        let backend = match driver {
            "local" => Fields::read(&settings, LOCAL_FIELDS, &path, issues).map(|f| BackendOptions::Local(LocalOptions::from_fields(&f))),
            "redis" => Fields::read(&settings, REDIS_FIELDS, &path, issues).map(|f| BackendOptions::Redis(StoreOptions::from_fields(&f))),
            "postgres" => {
                Fields::read(&settings, POSTGRES_FIELDS, &path, issues).map(|f| BackendOptions::Postgres(PostgresOptions::from_fields(&f)))
            }
            "mysql" => Fields::read(&settings, MYSQL_FIELDS, &path, issues).map(|f| BackendOptions::Mysql(MysqlOptions::from_fields(&f))),
            "file" => Fields::read(&settings, FILE_FIELDS, &path, issues).map(|f| BackendOptions::File(FileOptions::from_fields(&f))),
            "policy" => read_policy(&settings, &path, issues),
            other => Some(BackendOptions::App { driver: other.to_owned(), settings }),
        };
        if let Some(backend) = backend {
            backends.insert(name.clone(), backend);
        }
    }
    backends
}

/// Whether this build has the driver `driver` (the drivers of crate
/// features, each named as its feature; `local`, `policy` and app drivers
/// always are).
fn compiled_in(driver: &str) -> bool {
    let built = [
        ("redis", cfg!(feature = "redis")),
        ("postgres", cfg!(feature = "postgres")),
        ("mysql", cfg!(feature = "mysql")),
        ("file", cfg!(feature = "file")),
    ];
    !built.contains(&(driver, false))
}

/// The issue of the backend `name`, whose driver this build left out.
pub(crate) fn not_compiled_in(name: &str, driver: &str) -> Issue {
    Issue::new(format!("backends.{name}.driver"), format!("the {driver} driver is not compiled in (enable the crate feature `{driver}`)"))
}

/// A `driver: policy` backend's settings; every rule but the default has
/// exactly one pattern. Its members are checked by [`settle_policy`].
fn read_policy(settings: &Map<String, Value>, path: &str, issues: &mut Issues) -> Option<BackendOptions> {
    let before = issues.0.len();
    let rules = settings.get("rules").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    for (index, rule) in rules.iter().enumerate().filter(|(_, rule)| rule.is_object()) {
        if PATTERN_FIELDS.iter().filter(|name| rule.get(**name).is_some()).count() != 1 {
            issues.push(format!("{path}.rules[{index}]"), "needs exactly one of prefix and glob");
        }
    }
    let fields = Fields::read(settings, POLICY_FIELDS, path, issues)?;
    (issues.0.len() == before).then(|| BackendOptions::Policy(PolicyOptions::from_fields(&fields)))
}

/// Checks a policy's rules against the other backends, which must exist
/// and be of a driver with a tier, and settles each rule's minimum tier:
/// the first member's when omitted, and no member below it. A rule that
/// fails closed is served by its first member only, so it lists one.
fn settle_policy(name: &str, policy: &mut PolicyOptions, tiers: &BTreeMap<String, Option<Tier>>, given: &Value, issues: &mut Issues) {
    let rules = policy.rules.iter_mut().enumerate().map(|(i, rule)| (format!("rules[{i}]"), rule));
    for (label, rule) in rules.chain(std::iter::once(("default".to_owned(), &mut policy.default))) {
        let path = format!("backends.{name}.{label}");
        let mut member_tiers = Vec::new();
        for member in &rule.backends {
            match tiers.get(member) {
                None => issues.push(format!("{path}.backends"), format!("names {member}, which is not a backend of these options")),
                Some(None) => issues.push(
                    format!("{path}.backends"),
                    format!("names {member}, whose driver a policy cannot compose (only local, file, redis and postgres backends)"),
                ),
                Some(Some(tier)) => member_tiers.push((member, *tier)),
            }
        }
        let minimum_given = rule_field(given, &label, "minTier").is_some();
        if !minimum_given {
            if let Some((_, first)) = member_tiers.first() {
                rule.min_tier = *first;
            }
        }
        for (member, tier) in &member_tiers {
            if *tier < rule.min_tier {
                issues.push(
                    format!("{path}.backends"),
                    format!("names {member} (tier {}), below the rule's minTier {}", tier.as_str(), rule.min_tier.as_str()),
                );
            }
        }
        if rule.on_unavailable == OnUnavailable::FailClosed && rule.backends.len() > 1 {
            issues.push(
                format!("{path}.backends"),
                "a rule that fails closed is served by its first backend only: list one, or set onUnavailable: fallBack",
            );
        }
    }
}

/// The field `field` of the policy rule `label` as the options wrote it.
fn rule_field<'a>(settings: &'a Value, label: &str, field: &str) -> Option<&'a Value> {
    let rule = match label.strip_prefix("rules[").and_then(|rest| rest.strip_suffix(']')) {
        Some(index) => settings.get("rules")?.get(index.parse::<usize>().ok()?)?,
        None => settings.get("default")?,
    };
    rule.get(field)
}

/// Reads an optional mapping; anything else but absence is an issue.
fn mapping<'a>(value: Option<&'a Value>, path: &str, issues: &mut Issues) -> Option<&'a Map<String, Value>> {
    match value {
        None | Some(Value::Null) => None,
        Some(Value::Object(map)) => Some(map),
        Some(_) => {
            issues.push(path, "expected a mapping");
            None
        }
    }
}

/// The values of one table of fields after validation, defaults filled in.
struct Fields(BTreeMap<&'static str, Value>);

impl Fields {
    fn defaults(table: &'static [Field]) -> Fields {
        let mut issues = Issues::default();
        Fields::read(&Map::new(), table, "", &mut issues).expect("a table without required fields has valid defaults")
    }

    /// Validates `map` against `table`, recording every problem; `None` when
    /// there was at least one.
    fn read(map: &Map<String, Value>, table: &'static [Field], path: &str, issues: &mut Issues) -> Option<Fields> {
        let before = issues.0.len();
        for name in map.keys() {
            if !table.iter().any(|f| f.name == name) {
                issues.push(join(path, name), "unknown field");
            }
        }
        let mut values = BTreeMap::new();
        for field in table {
            let at = join(path, field.name);
            match (map.get(field.name), field.fallback) {
                (None, Fallback::Required) => issues.push(at, "is required"),
                (None, Fallback::Absent) => {}
                (None, Fallback::Boolean(default)) => {
                    values.insert(field.name, Value::from(default));
                }
                (Some(value), _) if matches!(field.kind, Kind::Table(_)) => {
                    let Kind::Table(table) = field.kind else { unreachable!() };
                    match value {
                        Value::Object(map) => {
                            if let Some(inner) = Fields::read(map, table, &at, issues) {
                                values.insert(field.name, inner.into_value());
                            }
                        }
                        _ => issues.push(at, "expected a mapping"),
                    }
                }
                (Some(value), _) if matches!(field.kind, Kind::List(_)) => {
                    let Kind::List(table) = field.kind else { unreachable!() };
                    let Value::Array(items) = value else {
                        issues.push(at, "expected a list of mappings");
                        continue;
                    };
                    let read: Vec<Option<Value>> = items
                        .iter()
                        .enumerate()
                        .map(|(index, item)| {
                            let at = format!("{at}[{index}]");
                            match item {
                                Value::Object(map) => Fields::read(map, table, &at, issues).map(Fields::into_value),
                                _ => {
                                    issues.push(at, "expected a mapping");
                                    None
                                }
                            }
                        })
                        .collect();
                    if let Some(list) = read.into_iter().collect::<Option<Vec<Value>>>() {
                        values.insert(field.name, Value::Array(list));
                    }
                }
                (None, Fallback::Integer(default)) => {
                    values.insert(field.name, Value::from(default));
                }
                (None, Fallback::Text(default)) => {
                    values.insert(field.name, Value::from(default));
                }
                (Some(value), _) => match check(field.kind, value) {
                    Ok(value) => {
                        values.insert(field.name, value);
                    }
                    Err(message) => issues.push(at, message),
                },
            }
        }
        (issues.0.len() == before).then_some(Fields(values))
    }

    fn int(&self, name: &str) -> u32 {
        let value = self.0[name].as_u64().expect("validated integer");
        u32::try_from(value).expect("declared ranges fit in u32")
    }

    fn threshold(&self, name: &str) -> Option<u32> {
        self.0[name].as_u64().map(|value| u32::try_from(value).expect("declared ranges fit in u32"))
    }

    fn text(&self, name: &str) -> String {
        self.0[name].as_str().expect("validated string").to_owned()
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    fn optional_text(&self, name: &str) -> Option<String> {
        self.has(name).then(|| self.text(name))
    }

    fn boolean(&self, name: &str) -> bool {
        self.0[name].as_bool().expect("validated boolean")
    }

    fn texts(&self, name: &str) -> Vec<String> {
        let list = self.0[name].as_array().expect("validated list");
        list.iter().map(|value| value.as_str().expect("validated string").to_owned()).collect()
    }

    /// The validated fields of the nested table `name`.
    fn table(&self, name: &str, table: &'static [Field]) -> Fields {
        Fields::of_table(&self.0[name], table)
    }

    /// The fields of a table validated already (see [`Fields::into_value`]).
    fn of_table(value: &Value, table: &'static [Field]) -> Fields {
        let map = value.as_object().expect("validated table");
        Fields(table.iter().filter_map(|field| map.get(field.name).map(|value| (field.name, value.clone()))).collect())
    }

    fn into_value(self) -> Value {
        Value::Object(self.0.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }
}

fn check(kind: Kind, value: &Value) -> std::result::Result<Value, String> {
    match kind {
        Kind::Threshold { .. } if value.is_null() => Ok(Value::Null),
        Kind::Threshold { max } => check(Kind::Integer { min: 0, max }, value).map_err(|message| format!("{message}, or null")),
        Kind::Integer { min, max } => {
            let number = match value {
                Value::Number(n) => n.as_u64().map(|v| v as f64).or_else(|| n.as_i64().map(|v| v as f64)).or_else(|| n.as_f64()),
                _ => None,
            };
            match number {
                Some(n) if n.fract() == 0.0 && n >= min as f64 && n <= max as f64 => Ok(Value::from(n as u64)),
                Some(n) if n.fract() == 0.0 => Err(format!("must be an integer from {min} to {max}")),
                _ => Err(format!("expected an integer from {min} to {max}")),
            }
        }
        Kind::Text => match value {
            Value::String(s) if !s.is_empty() => Ok(value.clone()),
            _ => Err("expected a non-empty string".into()),
        },
        Kind::Boolean => match value {
            Value::Bool(_) => Ok(value.clone()),
            _ => Err("expected true or false".into()),
        },
        Kind::RedisUrls => match value {
            Value::Array(urls) if !urls.is_empty() => {
                for url in urls {
                    match url {
                        Value::String(s) if ["redis://", "rediss://"].iter().any(|p| s.starts_with(p)) => {}
                        _ => return Err("every entry must be a redis:// or rediss:// URL".into()),
                    }
                }
                Ok(value.clone())
            }
            _ => Err("expected a non-empty list of redis:// or rediss:// URLs".into()),
        },
        Kind::Table(_) | Kind::List(_) => unreachable!("tables and lists of tables are read by Fields::read"),
        Kind::Names => match value {
            Value::Array(names) if !names.is_empty() => {
                for (index, name) in names.iter().enumerate() {
                    match name {
                        Value::String(s) if !s.is_empty() => {
                            if names[..index].contains(name) {
                                return Err(format!("names {s} twice"));
                            }
                        }
                        _ => return Err("every entry must be a non-empty string".into()),
                    }
                }
                Ok(value.clone())
            }
            _ => Err("expected a non-empty list of backend names".into()),
        },
        Kind::Choice(choices) => match value {
            Value::String(s) if choices.contains(&s.as_str()) => Ok(value.clone()),
            _ => Err(format!("expected one of {}", choices.join(", "))),
        },
        Kind::PostgresUrl => match value {
            Value::String(s) if ["postgres://", "postgresql://"].iter().any(|p| s.starts_with(p)) => Ok(value.clone()),
            Value::String(_) => Err("must start with postgres:// or postgresql://".into()),
            _ => Err("expected a URL string".into()),
        },
        Kind::MysqlUrl => match value {
            Value::String(s) if s.starts_with("mysql://") => Ok(value.clone()),
            Value::String(_) => Err("must start with mysql://".into()),
            _ => Err("expected a URL string".into()),
        },
        Kind::SqlName => match value {
            Value::String(s)
                if (1..=40).contains(&s.len())
                    && s.bytes().enumerate().all(|(i, b)| b == b'_' || b.is_ascii_lowercase() || (i > 0 && b.is_ascii_digit())) =>
            {
                Ok(value.clone())
            }
            _ => Err("expected a lowercase SQL name: a letter or _, then up to 39 letters, digits or _".into()),
        },
        Kind::RedisUrl => match value {
            Value::String(s) if ["redis://", "rediss://", "unix://"].iter().any(|p| s.starts_with(p)) => Ok(value.clone()),
            Value::String(_) => Err("must start with redis://, rediss:// or unix://".into()),
            _ => Err("expected a URL string".into()),
        },
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn issue(path: &str, message: &str) -> Issue {
    Issue::new(path, message)
}

#[derive(Default)]
struct Issues(Vec<Issue>);

impl Issues {
    fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(Issue::new(path, message));
    }
}
