//! The one declaration of every option: name, type, range, default, meaning.
//!
//! The validator in `options::parse` and the JSON Schema (`options.schema.json`,
//! written by `build.rs` and checked for drift by a test) are both derived from
//! these tables, so they cannot disagree. This file depends on `serde_json`
//! alone because `build.rs` includes it too.

use serde_json::{json, Map, Value};

/// What values a field accepts.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// A whole number in `min..=max`.
    Integer {
        /// The smallest value accepted.
        min: u64,
        /// The largest value accepted.
        max: u64,
    },
    /// A non-empty string.
    Text,
    /// A `redis://`, `rediss://` or `unix://` URL.
    RedisUrl,
    /// A telemetry threshold in ms, `0..=max`, or `null` to disable the report.
    Threshold {
        /// The largest threshold accepted.
        max: u64,
    },
    /// `true` or `false`.
    Boolean,
    /// A non-empty list of `redis://` or `rediss://` URLs.
    RedisUrls,
    /// A `postgres://` or `postgresql://` URL.
    PostgresUrl,
    /// A `mysql://` URL.
    MysqlUrl,
    /// An SQL identifier we write unquoted in messages and quoted in
    /// statements: a lowercase letter or `_`, then up to 39 lowercase
    /// letters, digits or `_` (room for the suffixes of our tables).
    SqlName,
    /// A mapping with fields of its own.
    Table(&'static [Field]),
    /// A list of mappings, each with these fields.
    List(&'static [Field]),
    /// A non-empty list of distinct non-empty strings (names of backends).
    Names,
    /// One of these strings.
    Choice(&'static [&'static str]),
}

/// The value a field takes when it is omitted.
#[derive(Debug, Clone, Copy)]
pub enum Fallback {
    /// The field must be given.
    Required,
    /// Optional, with no value when omitted.
    Absent,
    /// This number.
    Integer(u64),
    /// This string.
    Text(&'static str),
    /// This boolean.
    Boolean(bool),
}

/// One option of a backend or connection.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The field's name as written in the options (camelCase).
    pub name: &'static str,
    /// The values it accepts.
    pub kind: Kind,
    /// Its value when omitted.
    pub fallback: Fallback,
    /// What it means, one sentence (also the JSON Schema's description).
    pub description: &'static str,
}

/// Largest timer a JavaScript host can arm (2^31 - 1 ms, about 24.8 days).
pub const MAX_TIMER_MS: u64 = 2_147_483_647;

const fn int(name: &'static str, min: u64, max: u64, default: u64, description: &'static str) -> Field {
    Field { name, kind: Kind::Integer { min, max }, fallback: Fallback::Integer(default), description }
}

/// The `driver` field every backend may carry.
pub const DRIVER: Field = Field {
    name: "driver",
    kind: Kind::Text,
    fallback: Fallback::Text("local"),
    description: "local (default), redis, postgres, mysql, file, policy, or the name of an app driver.",
};

const fn threshold(name: &'static str, default: u64, description: &'static str) -> Field {
    Field { name, kind: Kind::Threshold { max: MAX_TIMER_MS }, fallback: Fallback::Integer(default), description }
}

/// Telemetry thresholds, the same for every built-in driver.
const SLOW_ACQUIRE: Field =
    threshold("slowAcquireMs", 5_000, "Report an acquire that waited at least this long (telemetry, not an error); null disables.");
const SLOW_HOLD: Field = threshold("slowHoldMs", 60_000, "Report a lease held at least this long when it ends; null disables.");

/// Fields that mean the same in every driver that has them.
const WAIT_TIMEOUT: Field = int("waitTimeoutMs", 0, MAX_TIMER_MS, 5_000, "Default wait before WAIT_TIMEOUT; 0 tries once, then LOCK_BUSY.");
const MAX_KEY_BYTES: Field = int("maxKeyBytes", 1, 1_048_576, 1_024, "Largest key, in UTF-8 bytes.");

/// Fields that mean the same in every store driver (redis, postgres, mysql).
const MAX_WAITERS: Field =
    int("maxWaiters", 1, 100_000, 4_096, "Acquires in progress in this process (every one counts); one more is QUEUE_FULL.");
const MAX_LEASES: Field = int("maxLeases", 1, 10_000_000, 10_000, "Leases held by this process; one more is KEY_LIMIT.");
const SHUTDOWN_TIMEOUT: Field = int("shutdownTimeoutMs", 0, 600_000, 5_000, "How long close() spends releasing held leases.");

/// Fields that mean the same in the SQL drivers (postgres, mysql).
const SQL_NAMESPACE: Field = Field {
    name: "namespace",
    kind: Kind::Text,
    fallback: Fallback::Text("dokebi-lock"),
    description: "Processes share a key only within one table and namespace.",
};
const SQL_LEASE: Field = Field {
    name: "leaseMs",
    kind: Kind::Integer { min: 10, max: MAX_TIMER_MS },
    fallback: Fallback::Required,
    description: "Lease time: a lease not renewed or released expires after this long (on the server's clock).",
};
const SQL_FENCE_RETENTION: Field = int(
    "fenceRetentionMs",
    1,
    MAX_TIMER_MS,
    600_000,
    "How long a key's row (its fence counter) stays after the key's last grant once nothing holds or waits for it; fences never repeat while the server's clock does not step back further than this.",
);

/// Fields of a `driver: local` backend (besides `driver`).
pub const LOCAL_FIELDS: &[Field] = &[
    int("maxKeys", 1, 10_000_000, 10_000, "Keys held at once; one more acquire of a free key is KEY_LIMIT."),
    int("maxWaiters", 0, 1_000_000, 128, "Waiters across the whole backend; one more is QUEUE_FULL. With 0 a free key is still granted."),
    WAIT_TIMEOUT,
    MAX_KEY_BYTES,
    SLOW_ACQUIRE,
    SLOW_HOLD,
];

/// Fields of a `driver: redis` backend (besides `driver`).
pub const REDIS_FIELDS: &[Field] = &[
    Field {
        name: "connection",
        kind: Kind::Text,
        fallback: Fallback::Text("default"),
        description: "A name from dokebi-redis.connections.",
    },
    Field {
        name: "namespace",
        kind: Kind::Text,
        fallback: Fallback::Text("dokebi-lock"),
        description: "Prefix of every Redis key this backend writes.",
    },
    Field {
        name: "leaseMs",
        kind: Kind::Integer { min: 10, max: MAX_TIMER_MS },
        fallback: Fallback::Required,
        description: "Lease time: a lease not renewed or released expires after this long.",
    },
    WAIT_TIMEOUT,
    int("pollIntervalMs", 1, 60_000, 25, "Retry interval of a waiter while release notifications are down."),
    int("notifyPollIntervalMs", 1, 600_000, 250, "Safety-net retry interval of a waiter while release notifications are live."),
    MAX_WAITERS,
    MAX_LEASES,
    MAX_KEY_BYTES,
    SHUTDOWN_TIMEOUT,
    int(
        "replicaAcks",
        0,
        16,
        0,
        "Replicas that must have each acquire and renew (WAIT) before it counts, so a failover right after keeps the lock; 0 waits for none.",
    ),
    int(
        "fenceRetentionMs",
        1,
        MAX_TIMER_MS,
        600_000,
        "How long a key's fence counter stays in Redis after the key's last grant; fences never repeat while no server that can become primary has a clock further behind than this.",
    ),
    SLOW_ACQUIRE,
    SLOW_HOLD,
];

/// Fields of a `driver: postgres` backend (besides `driver`): the redis
/// backend's where they mean the same, and where its table is.
pub const POSTGRES_FIELDS: &[Field] = &[
    Field {
        name: "connection",
        kind: Kind::Text,
        fallback: Fallback::Text("default"),
        description: "A name from dokebi-postgres.connections.",
    },
    SQL_NAMESPACE,
    SQL_LEASE,
    WAIT_TIMEOUT,
    int("pollIntervalMs", 1, 60_000, 25, "Retry interval of a waiter while the LISTEN connection is down."),
    int("notifyPollIntervalMs", 1, 600_000, 250, "Safety-net retry interval of a waiter while the LISTEN connection is live."),
    MAX_WAITERS,
    MAX_LEASES,
    MAX_KEY_BYTES,
    SHUTDOWN_TIMEOUT,
    SQL_FENCE_RETENTION,
    Field {
        name: "schema",
        kind: Kind::SqlName,
        fallback: Fallback::Text("public"),
        description: "The schema of the lock tables.",
    },
    Field {
        name: "table",
        kind: Kind::SqlName,
        fallback: Fallback::Text("dokebi_lock"),
        description: "The name of the key table; its holders, waiters and functions are named after it (<table>_holders, <table>_take, ...), so it does not end with _holders, _waiting, _fence_until or _pkey.",
    },
    Field {
        name: "autoCreate",
        kind: Kind::Boolean,
        fallback: Fallback::Boolean(true),
        description: "Create the schema, tables and functions on first use when missing; false fails with PROVIDER_FAILED whose fix is the SQL to run.",
    },
    SLOW_ACQUIRE,
    SLOW_HOLD,
];

/// Fields of a connection under `dokebi-postgres.connections.<name>`.
pub const POSTGRES_CONNECTION_FIELDS: &[Field] = &[
    Field {
        name: "url",
        kind: Kind::PostgresUrl,
        fallback: Fallback::Required,
        description:
            "postgres://user:password@host:port/database, with libpq's sslmode (disable, prefer, require, verify-ca, verify-full), sslrootcert, sslcert, sslkey and channel_binding (disable, prefer, require: SCRAM bound to the TLS link); through a pooler in transaction mode (PgBouncer) too.",
    },
    Field {
        name: "listenUrl",
        kind: Kind::PostgresUrl,
        fallback: Fallback::Absent,
        description: "A direct connection (not a pooler in transaction mode) for LISTEN wake-ups; url when omitted.",
    },
    int("connectTimeoutMs", 1, 600_000, 5_000, "Bound on establishing a connection."),
    int(
        "commandTimeoutMs",
        1,
        600_000,
        2_000,
        "Bound on one statement; past it the outcome is unknown (OUTCOME_UNKNOWN). Row-lock waits end at three quarters of it, refused by the server (PROVIDER_FAILED, nothing done).",
    ),
    int("poolSize", 1, 64, 2, "Connections for lock statements; each pipelines many statements."),
];

/// Fields of a `driver: mysql` backend (besides `driver`): the postgres
/// backend's where they mean the same; no schema (the tables live in the
/// URL's database).
pub const MYSQL_FIELDS: &[Field] = &[
    Field {
        name: "connection",
        kind: Kind::Text,
        fallback: Fallback::Text("default"),
        description: "A name from dokebi-mysql.connections.",
    },
    SQL_NAMESPACE,
    SQL_LEASE,
    WAIT_TIMEOUT,
    int("pollIntervalMs", 1, 60_000, 25, "Retry interval of a waiter while the release poller is down."),
    int("notifyPollIntervalMs", 1, 600_000, 250, "Safety-net retry interval of a waiter while the release poller reads the log."),
    MAX_WAITERS,
    MAX_LEASES,
    int("maxKeyBytes", 1, 1_048_576, 1_024, "Largest key, in UTF-8 bytes; a key over 255 bytes is kept as its SHA-256."),
    SHUTDOWN_TIMEOUT,
    SQL_FENCE_RETENTION,
    Field {
        name: "table",
        kind: Kind::SqlName,
        fallback: Fallback::Text("dokebi_lock"),
        description: "The name of the key table in the URL's database; its holders, waiters and procedures are named after it (<table>_holders, <table>_take, ...), so it does not end with _holders, _waiting or _released.",
    },
    Field {
        name: "autoCreate",
        kind: Kind::Boolean,
        fallback: Fallback::Boolean(true),
        description: "Create the tables and procedures on first use when missing; false fails with PROVIDER_FAILED whose fix is the SQL to run.",
    },
    SLOW_ACQUIRE,
    SLOW_HOLD,
];

/// Fields of a connection under `dokebi-mysql.connections.<name>`.
pub const MYSQL_CONNECTION_FIELDS: &[Field] = &[
    Field {
        name: "url",
        kind: Kind::MysqlUrl,
        fallback: Fallback::Required,
        description:
            "mysql://user:password@host:port/database, with the mysql client's ssl-mode (DISABLED, PREFERRED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY), ssl-ca, ssl-cert and ssl-key.",
    },
    int("connectTimeoutMs", 1, 600_000, 5_000, "Bound on establishing a connection."),
    int(
        "commandTimeoutMs",
        1,
        600_000,
        2_000,
        "Bound on one statement; past it the outcome is unknown (OUTCOME_UNKNOWN). Row-lock waits end at three quarters of it in whole seconds (at least 1 s), refused by the server (PROVIDER_FAILED, nothing done).",
    ),
    int("poolSize", 1, 64, 4, "Connections for lock statements; each runs one statement at a time."),
];

/// Fields of a `driver: file` backend (besides `driver`).
pub const FILE_FIELDS: &[Field] = &[
    Field {
        name: "directory",
        kind: Kind::Text,
        fallback: Fallback::Required,
        description: "Directory of the lock files, on a local file system, owned by this user and writable by nobody else; created 0700 when missing.",
    },
    Field {
        name: "namespace",
        kind: Kind::Text,
        fallback: Fallback::Text("dokebi-lock"),
        description: "Processes share a key only within one directory and namespace.",
    },
    int("maxKeys", 1, 10_000_000, 10_000, "Leases held at once by this process; one more acquire is KEY_LIMIT."),
    int("maxWaiters", 0, 1_000_000, 128, "Waiters of this process across the backend; one more is QUEUE_FULL. With 0 a free key is still granted."),
    WAIT_TIMEOUT,
    MAX_KEY_BYTES,
    int(
        "pollIntervalMs",
        1,
        60_000,
        50,
        "Safety-net retry interval of a waiter; releases wake waiters at once through inotify (Linux), other systems wait this long.",
    ),
    SLOW_ACQUIRE,
    SLOW_HOLD,
];

/// The most bytes a holder label takes in an owner token, encoded: what
/// MySQL's 64-byte token column leaves after the random part and its dot
/// (see `src/holder.rs`).
pub const MAX_HOLDER_BYTES: usize = 40;

/// The tiers a backend can promise, lowest first (see `src/policy/tier.rs`).
pub const TIERS: &[&str] = &["process", "host", "shared"];

/// What a rule does when its preferred backend cannot serve.
pub const ON_UNAVAILABLE: &[&str] = &["failClosed", "fallBack"];

/// The fields every rule of a policy has, the default rule's all of them.
const RULE_BACKENDS: Field = Field {
    name: "backends",
    kind: Kind::Names,
    fallback: Fallback::Required,
    description: "Backends of this configuration (local, file, redis, postgres or mysql) that may serve the rule's keys, preferred first.",
};
const RULE_MIN_TIER: Field = Field {
    name: "minTier",
    kind: Kind::Choice(TIERS),
    fallback: Fallback::Absent,
    description: "The lowest tier that may serve the rule's keys (process < host < shared); the first backend's tier when omitted. Every listed backend must be at or above it.",
};
const RULE_ON_UNAVAILABLE: Field = Field {
    name: "onUnavailable",
    kind: Kind::Choice(ON_UNAVAILABLE),
    fallback: Fallback::Text("failClosed"),
    description: "failClosed: only the first backend serves, and its unavailability is NO_ELIGIBLE_BACKEND; fallBack: the next listed backend serves while an earlier one is unreachable or failing (never on contention).",
};

/// Fields of one entry of a policy's `rules`: exactly one of `prefix` and
/// `glob` says which keys it takes.
pub const RULE_FIELDS: &[Field] = &[
    Field {
        name: "prefix",
        kind: Kind::Text,
        fallback: Fallback::Absent,
        description: "The rule takes the keys that start with this text.",
    },
    Field {
        name: "glob",
        kind: Kind::Text,
        fallback: Fallback::Absent,
        description: "The rule takes the keys this pattern matches whole: * any run of characters, ? one character.",
    },
    RULE_BACKENDS,
    RULE_MIN_TIER,
    RULE_ON_UNAVAILABLE,
];

/// The names of the fields of which a rule has exactly one.
pub const PATTERN_FIELDS: [&str; 2] = ["prefix", "glob"];

/// Fields of a policy's `default` rule: the keys no other rule takes.
pub const DEFAULT_RULE_FIELDS: &[Field] = &[RULE_BACKENDS, RULE_MIN_TIER, RULE_ON_UNAVAILABLE];

/// Fields of a `driver: policy` backend (besides `driver`).
pub const POLICY_FIELDS: &[Field] = &[
    Field {
        name: "rules",
        kind: Kind::List(RULE_FIELDS),
        fallback: Fallback::Absent,
        description: "Rules by key, tried in order: the first whose prefix or glob matches a key decides where it lives.",
    },
    Field {
        name: "default",
        kind: Kind::Table(DEFAULT_RULE_FIELDS),
        fallback: Fallback::Required,
        description: "The rule of the keys no entry of rules takes.",
    },
    int(
        "waitTimeoutMs",
        0,
        MAX_TIMER_MS,
        5_000,
        "Default wait before WAIT_TIMEOUT, across every backend tried; 0 tries once, then LOCK_BUSY.",
    ),
    int(
        "reprobeCooldownMs",
        0,
        MAX_TIMER_MS,
        5_000,
        "How long a backend found unavailable is passed over before one acquire tries it again.",
    ),
];

/// Fields of a connection under `dokebi-redis.connections.<name>`: exactly
/// one of `url`, `sentinel` and `cluster` says where Redis is.
pub const CONNECTION_FIELDS: &[Field] = &[
    Field {
        name: "url",
        kind: Kind::RedisUrl,
        fallback: Fallback::Absent,
        description: "One server: redis://[user:password@]host:port/db, rediss:// for TLS, or unix:///path.",
    },
    Field {
        name: "sentinel",
        kind: Kind::Table(SENTINEL_FIELDS),
        fallback: Fallback::Absent,
        description: "A primary found and followed through Redis Sentinel.",
    },
    Field {
        name: "cluster",
        kind: Kind::Table(CLUSTER_FIELDS),
        fallback: Fallback::Absent,
        description: "A Redis Cluster: each key goes to the primary of its slot.",
    },
    Field {
        name: "tls",
        kind: Kind::Table(TLS_FIELDS),
        fallback: Fallback::Absent,
        description: "How the connection's TLS links (rediss:// URLs, sentinel.tls) verify the server and prove the client: each PEM as text or as a file path.",
    },
    int("connectTimeoutMs", 1, 600_000, 5_000, "Bound on establishing a connection."),
    int("commandTimeoutMs", 1, 600_000, 2_000, "Bound on one command; past it the outcome is unknown (OUTCOME_UNKNOWN)."),
];

/// The names of the fields of which a connection has exactly one.
pub const ENDPOINT_FIELDS: [&str; 3] = ["url", "sentinel", "cluster"];

/// Fields of `connections.<name>.sentinel`.
pub const SENTINEL_FIELDS: &[Field] = &[
    Field {
        name: "nodes",
        kind: Kind::RedisUrls,
        fallback: Fallback::Required,
        description: "The sentinels, as redis:// (or rediss://) URLs; user and password in a URL are that sentinel's.",
    },
    Field {
        name: "primaryName",
        kind: Kind::Text,
        fallback: Fallback::Required,
        description: "The name the sentinels monitor the primary under (sentinel monitor <name> ...).",
    },
    Field { name: "username", kind: Kind::Text, fallback: Fallback::Absent, description: "User on the primary (ACL), if any." },
    Field { name: "password", kind: Kind::Text, fallback: Fallback::Absent, description: "Password on the primary, if any." },
    int("db", 0, 1_000_000, 0, "Database number on the primary."),
    Field { name: "tls", kind: Kind::Boolean, fallback: Fallback::Boolean(false), description: "Connect to the primary over TLS." },
];

/// Fields of `connections.<name>.tls`: each PEM either as text (`ca`,
/// `cert`, `key`) or as the path of a file holding it (`caFile`, ...), not
/// both.
pub const TLS_FIELDS: &[Field] = &[
    Field {
        name: "ca",
        kind: Kind::Text,
        fallback: Fallback::Absent,
        description:
            "PEM of the authorities that sign the server's certificate; they replace the system's trusted ones for this connection.",
    },
    Field { name: "caFile", kind: Kind::Text, fallback: Fallback::Absent, description: "Path of a PEM file to use as ca." },
    Field {
        name: "cert",
        kind: Kind::Text,
        fallback: Fallback::Absent,
        description: "PEM of the client certificate (chain) for servers that demand one (mutual TLS, tls-auth-clients yes); needs key.",
    },
    Field { name: "certFile", kind: Kind::Text, fallback: Fallback::Absent, description: "Path of a PEM file to use as cert." },
    Field {
        name: "key",
        kind: Kind::Text,
        fallback: Fallback::Absent,
        description: "PEM of the client certificate's private key (never logged); needs cert.",
    },
    Field { name: "keyFile", kind: Kind::Text, fallback: Fallback::Absent, description: "Path of a PEM file to use as key." },
    Field {
        name: "servername",
        kind: Kind::Text,
        fallback: Fallback::Absent,
        description: "The name the server's certificate must carry (and SNI), when it is not the host of the URL.",
    },
];

/// Fields of `connections.<name>.cluster`.
pub const CLUSTER_FIELDS: &[Field] = &[Field {
    name: "nodes",
    kind: Kind::RedisUrls,
    fallback: Fallback::Required,
    description: "Seed nodes, as redis:// (or rediss://) URLs; the user, password and TLS of the first apply to every node.",
}];

fn field_schema(field: &Field) -> Value {
    let mut schema = match field.kind {
        Kind::Integer { min, max } => json!({ "type": "integer", "minimum": min, "maximum": max }),
        Kind::Text => json!({ "type": "string", "minLength": 1 }),
        Kind::RedisUrl => json!({ "type": "string", "pattern": "^(redis|rediss|unix)://" }),
        Kind::Threshold { max } => json!({ "type": ["integer", "null"], "minimum": 0, "maximum": max }),
        Kind::Boolean => json!({ "type": "boolean" }),
        Kind::RedisUrls => json!({ "type": "array", "minItems": 1, "items": { "type": "string", "pattern": "^(redis|rediss)://" } }),
        Kind::PostgresUrl => json!({ "type": "string", "pattern": "^postgres(ql)?://" }),
        Kind::MysqlUrl => json!({ "type": "string", "pattern": "^mysql://" }),
        Kind::SqlName => json!({ "type": "string", "pattern": "^[a-z_][a-z0-9_]{0,39}$" }),
        Kind::Table(fields) => object_schema(None, fields),
        Kind::List(fields) => json!({ "type": "array", "items": object_schema(None, fields) }),
        Kind::Names => json!({ "type": "array", "minItems": 1, "uniqueItems": true, "items": { "type": "string", "minLength": 1 } }),
        Kind::Choice(choices) => json!({ "type": "string", "enum": choices }),
    };
    let object = schema.as_object_mut().expect("schema is an object");
    object.insert("description".into(), Value::from(field.description));
    match field.fallback {
        Fallback::Required | Fallback::Absent => {}
        Fallback::Boolean(value) => {
            object.insert("default".into(), Value::from(value));
        }
        Fallback::Integer(value) => {
            object.insert("default".into(), Value::from(value));
        }
        Fallback::Text(value) => {
            object.insert("default".into(), Value::from(value));
        }
    }
    schema
}

fn object_schema(driver: Option<Value>, fields: &[Field]) -> Value {
    let mut properties = Map::new();
    if let Some(driver) = driver {
        properties.insert("driver".into(), driver);
    }
    let mut required = Vec::new();
    for field in fields {
        properties.insert(field.name.into(), field_schema(field));
        if matches!(field.fallback, Fallback::Required) {
            required.push(Value::from(field.name));
        }
    }
    let mut schema = json!({ "type": "object", "additionalProperties": false, "properties": properties });
    if !required.is_empty() {
        schema["required"] = Value::Array(required);
    }
    schema
}

/// The JSON Schema of the whole YAML file, derived from the tables above.
pub fn json_schema() -> Value {
    let local = object_schema(Some(json!({ "const": "local", "description": DRIVER.description })), LOCAL_FIELDS);
    let mut redis = object_schema(Some(json!({ "const": "redis" })), REDIS_FIELDS);
    redis["required"].as_array_mut().expect("leaseMs is required").insert(0, Value::from("driver"));
    let mut postgres = object_schema(Some(json!({ "const": "postgres" })), POSTGRES_FIELDS);
    postgres["required"].as_array_mut().expect("leaseMs is required").insert(0, Value::from("driver"));
    let mut mysql = object_schema(Some(json!({ "const": "mysql" })), MYSQL_FIELDS);
    mysql["required"].as_array_mut().expect("leaseMs is required").insert(0, Value::from("driver"));
    let mut file = object_schema(Some(json!({ "const": "file" })), FILE_FIELDS);
    file["required"].as_array_mut().expect("directory is required").insert(0, Value::from("driver"));
    let mut policy = object_schema(Some(json!({ "const": "policy" })), POLICY_FIELDS);
    policy["required"].as_array_mut().expect("default is required").insert(0, Value::from("driver"));
    policy["properties"]["rules"]["items"]["oneOf"] = PATTERN_FIELDS.iter().map(|name| json!({ "required": [name] })).collect();
    let app_driver = json!({
        "type": "object",
        "description": "A backend of an app driver: its settings are validated by that driver.",
        "properties": { "driver": { "type": "string", "minLength": 1, "not": { "enum": ["local", "redis", "postgres", "mysql", "file", "policy"] } } },
        "required": ["driver"]
    });
    let mut connection = object_schema(None, CONNECTION_FIELDS);
    connection["oneOf"] = ENDPOINT_FIELDS.iter().map(|name| json!({ "required": [name] })).collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://dokebi.dev/schemas/dokebi-lock/options.schema.json",
        "title": "dokebi-lock options",
        "type": "object",
        "required": ["schemaVersion", "options"],
        "properties": {
            "schemaVersion": { "const": 1 },
            "options": {
                "type": "object",
                "description": "Options of every plugin of the app; dokebi-lock reads the three below.",
                "properties": {
                    "dokebi-lock": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "backends": {
                                "type": "object",
                                "additionalProperties": { "anyOf": [local, redis, file, app_driver, postgres, mysql, policy] }
                            },
                            "holder": {
                                "type": "string",
                                "minLength": 1,
                                "maxLength": MAX_HOLDER_BYTES,
                                "description": "The label of this app's holders in inspect and in WAIT_TIMEOUT and LOCK_BUSY details (at most 40 bytes as stored: letters, digits and . _ ~ - count one byte, any other byte three); this host's name and pid when omitted."
                            }
                        }
                    },
                    "dokebi-mysql": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "connections": { "type": "object", "additionalProperties": object_schema(None, MYSQL_CONNECTION_FIELDS) }
                        }
                    },
                    "dokebi-postgres": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "connections": { "type": "object", "additionalProperties": object_schema(None, POSTGRES_CONNECTION_FIELDS) }
                        }
                    },
                    "dokebi-redis": {
                        "type": "object",
                        "additionalProperties": false,
                        "properties": {
                            "connections": { "type": "object", "additionalProperties": connection }
                        }
                    }
                }
            }
        }
    })
}
