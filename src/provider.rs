//! The provider: every configured backend, by name, with one `close()`.
//!
//! [`Backend`] and [`Lease`] put the drivers behind one API; each driver's
//! own types stay available for callers that want them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
use crate::abort::AbortController;
use crate::abort::AbortSignal;
use crate::acquire::AcquireOptions;
use crate::error::{ErrorCode, LockError, Result};
#[cfg(feature = "file")]
use crate::file::{FileBackend, FileLease};
use crate::force_release::ForcedRelease;
use crate::inspect::Inspection;
use crate::local::{LocalBackend, LocalCounts, LocalLease};
use crate::log::{stderr_logger, Level, LogRecord, Logger};
use crate::policy::{Acquisition, Places, PolicyBackend, PolicyLease, Router, Tier};
use crate::telemetry::Telemetry;

/// Where a provider reports what is not an error of a call.
#[derive(Clone)]
pub struct Hooks {
    /// The operational log (`LOCK_BACKEND_READY`, cleanup failures).
    pub logger: Logger,
    /// Telemetry (slow acquires and holds, wait timeouts, lost leases, and
    /// the acquire and hold events its sink asks for, see
    /// [`crate::telemetry::TelemetrySink`]); `None` reports nothing (the
    /// cargo feature `metrics` still records its metrics, docs/rust.md).
    pub telemetry: Option<Telemetry>,
    /// An event loop whose thread runs the redis operations started on it
    /// (see [`crate::host`]); `None` runs them on the driver's thread.
    pub host: Option<Arc<dyn Host>>,
    /// A PEM file of authorities that TLS links trust besides the system's
    /// (a connection's own `tls.ca` replaces both). The Node surface passes
    /// `NODE_EXTRA_CA_CERTS` here; one that cannot be read is logged
    /// (`REDIS_EXTRA_CA_IGNORED`) and left out.
    pub extra_authorities: Option<std::path::PathBuf>,
}

impl Default for Hooks {
    /// Warnings and errors to standard error, no telemetry, no host.
    fn default() -> Self {
        Hooks { logger: stderr_logger(), telemetry: None, host: None, extra_authorities: None }
    }
}
use crate::host::Host;
#[cfg(feature = "mysql")]
use crate::mysql::{MysqlBackend, MysqlDriver, MysqlLease};
use crate::options::{not_compiled_in, BackendOptions, Options, StoreOptions};
#[cfg(feature = "postgres")]
use crate::postgres::{PostgresBackend, PostgresDriver, PostgresLease};
#[cfg(feature = "redis")]
use crate::redis::{RedisBackend, RedisDriver, RedisLease};
#[cfg(feature = "mysql")]
use crate::status::MysqlStatus;
#[cfg(feature = "postgres")]
use crate::status::PostgresStatus;
#[cfg(feature = "redis")]
use crate::status::RedisStatus;
use crate::status::{BackendStatus, LeaseCounts};
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
use crate::store::KeepAlive;

/// All backends of one configuration.
pub struct Provider {
    backends: BTreeMap<String, Backend>,
    closed: AtomicBool,
    /// The redis driver's runtime and connections; `None` without redis
    /// backends, so a local-only provider starts no thread and opens no socket.
    #[cfg(feature = "redis")]
    redis: Option<RedisDriver>,
    /// The postgres driver's runtime and connections; `None` without
    /// postgres backends.
    #[cfg(feature = "postgres")]
    postgres: Option<PostgresDriver>,
    /// The mysql driver's runtime and connections; `None` without mysql
    /// backends.
    #[cfg(feature = "mysql")]
    mysql: Option<MysqlDriver>,
}

impl Provider {
    /// Builds every backend of `options` with the default [`Hooks`].
    pub fn open(options: Options) -> Result<Provider> {
        Provider::open_with(options, Hooks::default())
    }

    /// Builds every backend of `options`, reporting through `hooks`. Backends
    /// of app drivers belong to the Node surface: here they are
    /// `UNKNOWN_DRIVER`.
    ///
    /// Redis connections are made in the background: the call never blocks,
    /// and an unreachable server shows up as `PROVIDER_FAILED` on acquire.
    pub fn open_with(options: Options, hooks: Hooks) -> Result<Provider> {
        let Hooks { logger, telemetry, host, extra_authorities } = hooks;
        let telemetry = crate::telemetry::measured(telemetry);
        // Only the store drivers run work on a host, only redis reads more authorities.
        #[cfg(not(any(feature = "redis", feature = "postgres", feature = "mysql")))]
        let _ = host;
        #[cfg(not(feature = "redis"))]
        let _ = extra_authorities;
        #[cfg(feature = "redis")]
        let redis = RedisDriver::open(&options, &logger, &telemetry, &host, extra_authorities.as_deref())?;
        #[cfg(feature = "postgres")]
        let postgres = PostgresDriver::open(&options, &logger, &telemetry, &host)?;
        #[cfg(feature = "mysql")]
        let mysql = MysqlDriver::open(&options, &logger, &telemetry, &host)?;
        let mut backends = BTreeMap::new();
        #[cfg(feature = "redis")]
        let mut redis_backends = BTreeMap::new();
        #[cfg(feature = "postgres")]
        let mut postgres_backends = BTreeMap::new();
        #[cfg(feature = "mysql")]
        let mut mysql_backends = BTreeMap::new();
        // Policies compose the other backends, so they are built last; a
        // key's place is one for all of them.
        let places = Places::default();
        let holder = options.holder.clone();
        let (policies, others): (Vec<_>, Vec<_>) =
            options.backends.into_iter().partition(|(_, backend)| matches!(backend, BackendOptions::Policy(_)));
        for (name, backend) in others.into_iter().chain(policies) {
            let built = match backend {
                BackendOptions::Local(local) => Backend::Local(LocalBackend::labelled(&name, local, telemetry.clone(), holder.clone())),
                #[cfg(feature = "redis")]
                BackendOptions::Redis(settings) => {
                    let driver = redis.as_ref().expect("a redis backend starts the redis driver");
                    redis_backends.insert(name.clone(), settings.clone());
                    Backend::Redis(driver.backend(&name, settings, &holder))
                }
                #[cfg(feature = "postgres")]
                BackendOptions::Postgres(settings) => {
                    let driver = postgres.as_ref().expect("a postgres backend starts the postgres driver");
                    postgres_backends.insert(name.clone(), settings.clone());
                    Backend::Postgres(driver.backend(&name, settings, &holder))
                }
                #[cfg(feature = "mysql")]
                BackendOptions::Mysql(settings) => {
                    let driver = mysql.as_ref().expect("a mysql backend starts the mysql driver");
                    mysql_backends.insert(name.clone(), settings.clone());
                    Backend::Mysql(driver.backend(&name, settings, &holder))
                }
                #[cfg(feature = "file")]
                BackendOptions::File(settings) => Backend::File(FileBackend::open(&name, settings, telemetry.clone(), holder.clone())?),
                BackendOptions::Policy(settings) => Backend::Policy(open_policy(&name, &settings, &places, &backends, &logger, &telemetry)),
                BackendOptions::App { driver, .. } => {
                    return Err(LockError::new(ErrorCode::UnknownDriver, format!("backend {name}: no driver named {driver}"))
                        .with_details(serde_json::json!({ "backend": name, "driver": driver })));
                }
                // A driver this build left out (options made in code: read
                // options refuse it already).
                #[allow(unreachable_patterns)]
                left_out => return Err(LockError::invalid_options(vec![not_compiled_in(&name, left_out.driver())])),
            };
            logger(&LogRecord {
                level: Level::Debug,
                backend: name.clone(),
                code: "LOCK_BACKEND_READY",
                message: "backend is ready".into(),
            });
            backends.insert(name, built);
        }
        #[cfg(feature = "redis")]
        if let Some(driver) = &redis {
            driver.start(&redis_backends);
        }
        #[cfg(feature = "postgres")]
        if let Some(driver) = &postgres {
            driver.start(&postgres_backends);
        }
        #[cfg(feature = "mysql")]
        if let Some(driver) = &mysql {
            driver.start(&mysql_backends);
        }
        Ok(Provider {
            backends,
            closed: AtomicBool::new(false),
            #[cfg(feature = "redis")]
            redis,
            #[cfg(feature = "postgres")]
            postgres,
            #[cfg(feature = "mysql")]
            mysql,
        })
    }

    /// Loads the YAML file text and opens its backends.
    pub fn from_yaml(text: &str) -> Result<Provider> {
        Provider::open(Options::from_yaml(text)?)
    }

    /// The configured backend names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.backends.keys().map(String::as_str).collect()
    }

    /// The backend called `name`: `UNKNOWN_BACKEND` if there is none,
    /// `CLOSED` after `close()`.
    pub fn backend(&self, name: &str) -> Result<Backend> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(LockError::closed());
        }
        self.backends.get(name).cloned().ok_or_else(|| {
            LockError::new(ErrorCode::UnknownBackend, "no backend of that name is configured")
                .with_details(serde_json::json!({ "backend": name, "known": self.names() }))
        })
    }

    /// A snapshot of every backend, by name.
    pub fn status(&self) -> BTreeMap<String, BackendStatus> {
        self.backends.iter().map(|(name, backend)| (name.clone(), backend.status())).collect()
    }

    /// Closes every backend: waiters are rejected with `CLOSED`, held local
    /// leases become invalid, held redis leases are released within
    /// `shutdownTimeoutMs` (failures go to the logger as `CLEANUP_FAILED` /
    /// `CLEANUP_TIMEOUT`, never to the caller). Idempotent.
    pub async fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        for backend in self.backends.values() {
            backend.close().await;
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = &self.redis {
            redis.shut_down().await;
        }
        #[cfg(feature = "postgres")]
        if let Some(postgres) = &self.postgres {
            postgres.shut_down();
        }
        #[cfg(feature = "mysql")]
        if let Some(mysql) = &self.mysql {
            mysql.shut_down();
        }
    }
}

/// The policy backend `name` over `built` (every other backend, built
/// already; the options were checked to name only those).
fn open_policy(
    name: &str,
    settings: &crate::options::PolicyOptions,
    places: &Places,
    built: &BTreeMap<String, Backend>,
    logger: &Logger,
    telemetry: &Option<Telemetry>,
) -> PolicyBackend {
    let member = |member: &str| built.get(member).expect("a policy names built backends of its provider");
    let router = Router::new(
        name,
        settings,
        places.clone(),
        |name| {
            let backend = member(name);
            (backend.driver(), backend.tier().expect("a policy's members have a tier"))
        },
        logger.clone(),
        telemetry.clone(),
    );
    let members = router.members().iter().map(|info| member(&info.name).clone()).collect();
    PolicyBackend::new(router, members)
}

/// One backend of any driver. Cheap to clone.
#[derive(Clone, Debug)]
pub enum Backend {
    /// A `driver: local` backend.
    Local(LocalBackend),
    /// A `driver: redis` backend.
    #[cfg(feature = "redis")]
    Redis(RedisBackend),
    /// A `driver: postgres` backend.
    #[cfg(feature = "postgres")]
    Postgres(PostgresBackend),
    /// A `driver: mysql` backend.
    #[cfg(feature = "mysql")]
    Mysql(MysqlBackend),
    /// A `driver: file` backend.
    #[cfg(feature = "file")]
    File(FileBackend),
    /// A `driver: policy` backend.
    Policy(PolicyBackend),
}

impl Backend {
    /// Its driver's name.
    pub fn driver(&self) -> &'static str {
        match self {
            Backend::Local(_) => "local",
            #[cfg(feature = "redis")]
            Backend::Redis(_) => "redis",
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => "postgres",
            #[cfg(feature = "mysql")]
            Backend::Mysql(_) => "mysql",
            #[cfg(feature = "file")]
            Backend::File(_) => "file",
            Backend::Policy(_) => "policy",
        }
    }

    /// What it can promise; `None` for a policy, whose members each have one.
    pub fn tier(&self) -> Option<Tier> {
        match self {
            Backend::Local(_) => Some(Tier::Process),
            #[cfg(feature = "file")]
            Backend::File(_) => Some(Tier::Host),
            #[cfg(feature = "redis")]
            Backend::Redis(_) => Some(Tier::Shared),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Some(Tier::Shared),
            #[cfg(feature = "mysql")]
            Backend::Mysql(_) => Some(Tier::Shared),
            Backend::Policy(_) => None,
        }
    }

    /// Acquires `key` (see [`AcquireOptions`] for waiting, cancellation
    /// and the kind of hold: exclusive, shared or counted).
    pub async fn acquire(&self, key: &str, options: AcquireOptions) -> Result<Lease> {
        match self {
            Backend::Local(local) => local.acquire(key, options).await.map(Lease::Local),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => redis.acquire(key, options).await.map(Lease::Redis),
            #[cfg(feature = "postgres")]
            Backend::Postgres(postgres) => postgres.acquire(key, options).await.map(Lease::Postgres),
            #[cfg(feature = "mysql")]
            Backend::Mysql(mysql) => mysql.acquire(key, options).await.map(Lease::Mysql),
            #[cfg(feature = "file")]
            Backend::File(file) => file.acquire(key, options).await.map(Lease::File),
            Backend::Policy(policy) => policy.acquire(key, options).await.map(|lease| Lease::Policy(Box::new(lease))),
        }
    }

    /// Acquires every key of `keys` as one lease, or none of them: the wait
    /// covers the whole set, and a wait that ends (`WAIT_TIMEOUT`,
    /// `ABORTED`) leaves nothing held. Two callers asking for overlapping
    /// sets in different orders never deadlock. The options' kind applies
    /// to every key. `INVALID_ARGUMENT` for an empty set or a key given twice.
    pub async fn acquire_many(&self, keys: &[&str], options: AcquireOptions) -> Result<Lease> {
        match self {
            Backend::Local(local) => local.acquire_many(keys, options).await.map(Lease::Local),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => redis.acquire_many(keys, options).await.map(Lease::Redis),
            #[cfg(feature = "postgres")]
            Backend::Postgres(postgres) => postgres.acquire_many(keys, options).await.map(Lease::Postgres),
            #[cfg(feature = "mysql")]
            Backend::Mysql(mysql) => mysql.acquire_many(keys, options).await.map(Lease::Mysql),
            #[cfg(feature = "file")]
            Backend::File(file) => file.acquire_many(keys, options).await.map(Lease::File),
            Backend::Policy(policy) => policy.acquire_many(keys, options).await.map(|lease| Lease::Policy(Box::new(lease))),
        }
    }

    /// What the backend's store holds of `key` now, read at once: whether
    /// it is held and how, its live holders (each one's units, remaining
    /// lease, and fence where the store keeps it), how many acquires wait
    /// for it, and the highest fence it was granted. The store's own view,
    /// so it sees every process's holders and waiters (the local driver:
    /// this backend's). A read: it takes, extends and changes nothing.
    /// A policy inspects the members its rule for `key` allows and answers
    /// as [`crate::policy::inspection_choice`] chooses; `backend` says which
    /// answered.
    ///
    /// `INVALID_KEY` for a key an acquire would refuse, `CLOSED` once the
    /// backend closed, `PROVIDER_FAILED` when the store cannot answer. The
    /// file driver reads the records its holders write (see
    /// `file::holders`): no remaining lease there (none expires).
    pub async fn inspect(&self, key: &str) -> Result<Inspection> {
        match self {
            Backend::Local(local) => local.inspect(key),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => redis.inspect(key).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(postgres) => postgres.inspect(key).await,
            #[cfg(feature = "mysql")]
            Backend::Mysql(mysql) => mysql.inspect(key).await,
            #[cfg(feature = "file")]
            Backend::File(file) => file.inspect(key),
            Backend::Policy(policy) => Box::pin(policy.inspect(key)).await,
        }
    }

    /// An operator's break of a stuck lock: removes every holder of `key`
    /// at once, as if each lease had ended now, tells the waiters, and (on
    /// a store driver) raises the key's fence counter in the same step:
    /// the answer's `fence` is above every fence the key was granted, and
    /// every later grant's is above it (see [`crate::force_release`]). Each
    /// removed holder learns it at its next call to the store (a renewal
    /// finds its lease gone: `LEASE_LOST`; with `autoRenew`, within a
    /// renewal interval, and a `withLock` section's signal aborts); a local
    /// one at once. Logged as a warning (`LOCK_FORCE_RELEASED`, no key) and
    /// reported as telemetry (`forced-release`, by each backend that broke
    /// it). A policy breaks the key on every member its rule for `key`
    /// allows.
    ///
    /// Errors as [`Backend::inspect`]'s, and `OUTCOME_UNKNOWN` when the
    /// store's answer was lost: run it again if `inspect` still shows the
    /// holder (a lost break delivered late changes nothing once the key was
    /// granted or broken since: see
    /// [`crate::store::StoreBackend::force_release`]). The file
    /// driver cannot take a lock the kernel holds for another process:
    /// `INVALID_ARGUMENT` there.
    pub async fn force_release(&self, key: &str) -> Result<ForcedRelease> {
        match self {
            Backend::Local(local) => local.force_release(key),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => redis.force_release(key).await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(postgres) => postgres.force_release(key).await,
            #[cfg(feature = "mysql")]
            Backend::Mysql(mysql) => mysql.force_release(key).await,
            #[cfg(feature = "file")]
            Backend::File(_) => Err(LockError::new(
                ErrorCode::InvalidArgument,
                "forceRelease: the file driver cannot take a lock the kernel holds for another process",
            )),
            Backend::Policy(policy) => Box::pin(policy.force_release(key)).await,
        }
    }

    /// What the backend is doing now, as counts.
    pub fn status(&self) -> BackendStatus {
        match self {
            Backend::Local(local) => {
                let LocalCounts { held, held_shared, waiting, acquired, timed_out } = local.counts();
                BackendStatus::of("local", LeaseCounts { held, held_shared, waiting, acquired, timed_out, lost: 0 })
            }
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => {
                let counts = redis.counts();
                let redis = RedisStatus {
                    connected: counts.connected,
                    subscribed: counts.subscribed,
                    last_error: counts.last_error,
                    last_probe: counts.last_answer,
                };
                BackendStatus { redis: Some(redis), ..BackendStatus::of("redis", counts.leases()) }
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(postgres) => {
                let counts = postgres.counts();
                let postgres = PostgresStatus {
                    connected: counts.connected,
                    listening: counts.subscribed,
                    last_error: counts.last_error,
                    last_answer: counts.last_answer,
                };
                BackendStatus { postgres: Some(postgres), ..BackendStatus::of("postgres", counts.leases()) }
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql(mysql) => {
                let counts = mysql.counts();
                let mysql = MysqlStatus {
                    connected: counts.connected,
                    polling: counts.subscribed,
                    last_error: counts.last_error,
                    last_answer: counts.last_answer,
                };
                BackendStatus { mysql: Some(mysql), ..BackendStatus::of("mysql", counts.leases()) }
            }
            #[cfg(feature = "file")]
            Backend::File(file) => BackendStatus::of("file", file.counts()),
            Backend::Policy(policy) => BackendStatus { policy: Some(policy.members()), ..BackendStatus::of("policy", policy.counts()) },
        }
    }

    /// The options of a backend of a store driver (redis); `None` for the
    /// drivers whose leases never expire.
    pub fn store_options(&self) -> Option<&StoreOptions> {
        match self {
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => Some(redis.options()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(postgres) => Some(postgres.options()),
            #[cfg(feature = "mysql")]
            Backend::Mysql(mysql) => Some(mysql.options()),
            Backend::Local(_) | Backend::Policy(_) => None,
            #[cfg(feature = "file")]
            Backend::File(_) => None,
        }
    }

    /// How often a section's lease is renewed (see [`Backend::with_lock`]):
    /// every `leaseMs / 3`, so two renewals may fail before the lease runs
    /// out; `None` where leases never expire.
    pub fn auto_renew_every(&self) -> Option<Duration> {
        self.store_options().map(|options| Duration::from_millis(u64::from(options.lease_ms) / 3))
    }

    /// Aborted once the backend starts closing, for the drivers whose
    /// leases nothing but close ends (local, file); `None` for the others.
    pub(crate) fn closing(&self) -> Option<AbortSignal> {
        match self {
            Backend::Local(local) => Some(local.closing()),
            #[cfg(feature = "file")]
            Backend::File(file) => Some(file.closing()),
            Backend::Policy(_) => None,
            #[cfg(feature = "redis")]
            Backend::Redis(_) => None,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
            #[cfg(feature = "mysql")]
            Backend::Mysql(_) => None,
        }
    }

    async fn close(&self) {
        match self {
            Backend::Local(local) => local.close(),
            #[cfg(feature = "redis")]
            Backend::Redis(redis) => redis.close().await,
            #[cfg(feature = "postgres")]
            Backend::Postgres(postgres) => postgres.close().await,
            #[cfg(feature = "mysql")]
            Backend::Mysql(mysql) => mysql.close().await,
            #[cfg(feature = "file")]
            Backend::File(file) => file.close(),
            // Its members are closed as backends of the provider.
            Backend::Policy(_) => {}
        }
    }
}

/// A held lease of any driver.
#[derive(Debug)]
pub enum Lease {
    /// A lease of a local backend.
    Local(LocalLease),
    /// A lease of a redis backend.
    #[cfg(feature = "redis")]
    Redis(RedisLease),
    /// A lease of a postgres backend.
    #[cfg(feature = "postgres")]
    Postgres(PostgresLease),
    /// A lease of a mysql backend.
    #[cfg(feature = "mysql")]
    Mysql(MysqlLease),
    /// A lease of a file backend.
    #[cfg(feature = "file")]
    File(FileLease),
    /// A lease a policy backend got from one of its members.
    Policy(Box<PolicyLease>),
}

impl Lease {
    /// The key this lease is for (of a lease over several keys, the first
    /// the caller gave).
    pub fn key(&self) -> &str {
        match self {
            Lease::Local(lease) => lease.key(),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => lease.key(),
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => lease.key(),
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => lease.key(),
            #[cfg(feature = "file")]
            Lease::File(lease) => lease.key(),
            Lease::Policy(lease) => lease.lease().key(),
        }
    }

    /// Every key this lease holds, in the order the caller gave them.
    pub fn keys(&self) -> Vec<&str> {
        match self {
            Lease::Local(lease) => lease.keys(),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => lease.keys(),
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => lease.keys(),
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => lease.keys(),
            #[cfg(feature = "file")]
            Lease::File(lease) => lease.keys(),
            Lease::Policy(lease) => lease.lease().keys(),
        }
    }

    /// The fencing token (of a lease over several keys, that of
    /// [`Lease::key`]); compare numerically.
    pub fn fence(&self) -> u64 {
        match self {
            Lease::Local(lease) => lease.fence(),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => lease.fence(),
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => lease.fence(),
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => lease.fence(),
            #[cfg(feature = "file")]
            Lease::File(lease) => lease.fence(),
            Lease::Policy(lease) => lease.lease().fence(),
        }
    }

    /// The fence of each key, in the order of [`Lease::keys`]: above every
    /// earlier grant of that key.
    pub fn fences(&self) -> Vec<(&str, u64)> {
        match self {
            Lease::Local(lease) => lease.fences(),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => lease.fences(),
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => lease.fences(),
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => lease.fences(),
            #[cfg(feature = "file")]
            Lease::File(lease) => lease.fences(),
            Lease::Policy(lease) => lease.lease().fences(),
        }
    }

    /// True while the lease is held: not released, the backend not closed and (redis) not
    /// expired by the local estimate.
    pub fn is_valid(&self) -> bool {
        match self {
            Lease::Local(lease) => lease.is_valid(),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => lease.is_valid(),
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => lease.is_valid(),
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => lease.is_valid(),
            #[cfg(feature = "file")]
            Lease::File(lease) => lease.is_valid(),
            Lease::Policy(lease) => lease.lease().is_valid(),
        }
    }

    /// Time left: `None` for a lease that never expires while held, zero once
    /// it is invalid.
    pub fn remaining(&self) -> Option<Duration> {
        match self {
            Lease::Local(lease) => (!lease.is_valid()).then_some(Duration::ZERO),
            #[cfg(feature = "file")]
            Lease::File(lease) => (!lease.is_valid()).then_some(Duration::ZERO),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => Some(lease.remaining()),
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => Some(lease.remaining()),
            Lease::Policy(lease) => lease.lease().remaining(),
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => Some(lease.remaining()),
        }
    }

    /// Extends the lease; false when it is no longer ours.
    pub async fn renew(&self) -> Result<bool> {
        match self {
            Lease::Local(lease) => Ok(lease.renew()),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => lease.renew().await,
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => lease.renew().await,
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => lease.renew().await,
            #[cfg(feature = "file")]
            Lease::File(lease) => Ok(lease.is_valid()),
            Lease::Policy(lease) => Box::pin(lease.renew()).await,
        }
    }

    /// Renews the lease every `every` (`None`: never, only watching it) on
    /// the store drivers' thread until the returned guard is dropped,
    /// aborting `on_lost` the moment it is known lost or its backend starts
    /// closing; `None` for a lease that never expires while held. Only
    /// with a store driver (features `redis`, `postgres`, `mysql`).
    #[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
    pub fn keep_alive(&self, every: Option<Duration>, on_lost: AbortController) -> Option<KeepAlive> {
        match self {
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => Some(lease.keep_alive(every, on_lost)),
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => Some(lease.keep_alive(every, on_lost)),
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => Some(lease.keep_alive(every, on_lost)),
            Lease::Local(_) => None,
            #[cfg(feature = "file")]
            Lease::File(_) => None,
            Lease::Policy(lease) => lease.lease().keep_alive(every, on_lost),
        }
    }

    /// Releases the lease: true when this call released it, false when it was
    /// already released.
    pub async fn release(&self) -> Result<bool> {
        match self {
            Lease::Local(lease) => Ok(lease.release()),
            #[cfg(feature = "redis")]
            Lease::Redis(lease) => lease.release().await,
            #[cfg(feature = "postgres")]
            Lease::Postgres(lease) => lease.release().await,
            #[cfg(feature = "mysql")]
            Lease::Mysql(lease) => lease.release().await,
            #[cfg(feature = "file")]
            Lease::File(lease) => lease.release(),
            Lease::Policy(lease) => Box::pin(lease.release()).await,
        }
    }

    /// Of a lease a policy backend got: which member served it (its
    /// driver, tier, whether it fences, when); `None` for the others.
    pub fn served(&self) -> Option<&Acquisition> {
        match self {
            Lease::Policy(lease) => Some(lease.served()),
            _ => None,
        }
    }

    /// The backend whose lease this is: a policy lease's member, else
    /// `None` (the backend it was acquired from).
    pub(crate) fn member(&self) -> Option<&Backend> {
        match self {
            Lease::Policy(lease) => Some(lease.backend()),
            _ => None,
        }
    }
}
