//! Loads and validates options with the core, and builds the native part of
//! each backend.

use dokebi_lock::options::BackendOptions;
use dokebi_lock::policy::Places;
use dokebi_lock::{ErrorCode, LockError, Options};
use napi::Env;
use napi_derive::napi;

use crate::error::stash;
use crate::file::NativeFileBackend;
use crate::guard::sentinel;
use crate::local::LocalEngineObject;
use crate::policy::{LogForwarder, NativePolicy};
use crate::store::{LogWake, StoreProvider};
use crate::telemetry::TelemetryForwarder;

/// Validated options of one provider.
#[napi]
pub struct NativeOptions {
    options: Options,
    /// Where keys are held through the policies opened from these options
    /// (one provider's): shared by all of them.
    places: Places,
}

/// A configured backend: its name and driver.
#[napi(object)]
pub struct BackendInfo {
    pub name: String,
    pub driver: String,
}

/// Loads the whole YAML file; `null` on failure (see `takeError`).
#[napi(catch_unwind)]
pub fn load_yaml(text: String) -> Option<NativeOptions> {
    sentinel(|| wrap(Options::from_yaml(&text)))
}

/// Loads the `options` map, given as JSON text; `null` on failure.
#[napi(catch_unwind)]
pub fn load_config(json: String) -> Option<NativeOptions> {
    sentinel(|| wrap(parse_json(&json).and_then(|config| Options::from_config(&config))))
}

/// Loads the plugin sections (`dokebi-lock`, `dokebi-redis`,
/// `dokebi-postgres`, `dokebi-mysql`), each given as JSON text or absent;
/// `null` on failure.
#[napi(catch_unwind)]
pub fn load_sections(
    lock: Option<String>,
    redis: Option<String>,
    postgres: Option<String>,
    mysql: Option<String>,
) -> Option<NativeOptions> {
    sentinel(|| wrap(from_sections(lock, redis, postgres, mysql)))
}

fn from_sections(
    lock: Option<String>,
    redis: Option<String>,
    postgres: Option<String>,
    mysql: Option<String>,
) -> dokebi_lock::Result<Options> {
    let parse = |text: Option<String>| text.map(|t| parse_json(&t)).transpose();
    let (lock, redis, postgres, mysql) = (parse(lock)?, parse(redis)?, parse(postgres)?, parse(mysql)?);
    Options::from_sections(lock.as_ref(), redis.as_ref(), postgres.as_ref(), mysql.as_ref())
}

#[napi]
impl NativeOptions {
    /// Every backend, sorted by name.
    #[napi(catch_unwind)]
    pub fn backends(&self) -> Vec<BackendInfo> {
        self.options
            .backends
            .iter()
            .map(|(name, backend)| BackendInfo { name: name.clone(), driver: backend.driver().to_owned() })
            .collect()
    }

    /// Opens the backends of the store drivers (redis, postgres, mysql) at once (`null` on
    /// failure, see `takeError`);
    /// `onJsThread` says the event loop is Node's libuv, whose socket
    /// polling lets commands run on the JS thread (else they take the
    /// driver's thread); `logWake()` is called when driver warnings and
    /// errors wait in `takeLogs()`, telemetry events go to `telemetry(entry)`.
    #[napi(ts_args_type = "onJsThread: boolean, logWake: () => void, telemetry: (entry: TelemetryEntry) => void", catch_unwind)]
    pub fn open_stores(&self, env: &Env, on_js_thread: bool, log_wake: LogWake, telemetry: TelemetryForwarder) -> Option<StoreProvider> {
        sentinel(|| crate::store::open(env, &self.options, on_js_thread, log_wake, telemetry))
    }

    /// Opens the file backend `name` (`null` on failure, see `takeError`);
    /// telemetry events go to `telemetry(entry)`.
    #[napi(ts_args_type = "name: string, telemetry: (entry: TelemetryEntry) => void", catch_unwind)]
    pub fn open_file(&self, name: String, telemetry: TelemetryForwarder) -> Option<NativeFileBackend> {
        sentinel(|| crate::file::open(&self.options, &name, telemetry))
    }

    /// The decisions of the policy backend `name` (`null` when it is not
    /// one, see `takeError`): its logs go to `log(entry)`, its telemetry
    /// events to `telemetry(entry)`.
    #[napi(ts_args_type = "name: string, log: (entry: LogEntry) => void, telemetry: (entry: TelemetryEntry) => void", catch_unwind)]
    pub fn open_policy(&self, name: String, log: LogForwarder, telemetry: TelemetryForwarder) -> Option<NativePolicy> {
        sentinel(|| crate::policy::open(&self.options, &name, &self.places, log, telemetry))
    }

    /// The engine of the local backend `name`; its calls exchange numbers
    /// through the `Float64Array` its `out()` returns (see `local.rs`).
    /// `null` when `name` is not a local backend.
    #[napi(catch_unwind)]
    pub fn local_engine(&self, name: String) -> Option<LocalEngineObject> {
        sentinel(|| match self.options.backends.get(&name) {
            Some(BackendOptions::Local(local)) => Some(LocalEngineObject::new(*local, self.options.holder.clone())),
            _ => {
                stash(LockError::new(ErrorCode::UnknownBackend, "no local backend of that name is configured"));
                None
            }
        })
    }

    /// The settings of the app-driver backend `name` as JSON text (every field
    /// but `driver`, unvalidated: the app driver validates them); `null` when
    /// `name` is not an app-driver backend.
    #[napi(catch_unwind)]
    pub fn app_settings(&self, name: String) -> Option<String> {
        match self.options.backends.get(&name) {
            Some(BackendOptions::App { settings, .. }) => Some(serde_json::Value::Object(settings.clone()).to_string()),
            _ => None,
        }
    }
}

fn wrap(loaded: dokebi_lock::Result<Options>) -> Option<NativeOptions> {
    loaded.map(|options| NativeOptions { options, places: Places::default() }).map_err(stash).ok()
}

fn parse_json(text: &str) -> dokebi_lock::Result<serde_json::Value> {
    serde_json::from_str(text)
        .map_err(|err| LockError::invalid_options(vec![dokebi_lock::Issue::new(String::new(), "not plain data")]).with_cause(err))
}
