//! The policy driver for JS: the core's [`Router`] decides (which rule, which
//! member next, whether a failure moves on, what to count and report), and
//! the JS layer (`npm/lib/policy.js`) runs each try on the member backends
//! it opened, whatever their driver. No decision is made in JS.

use std::sync::Arc;
use std::time::UNIX_EPOCH;

use dokebi_lock::log::{Level, LogRecord, Logger};
use dokebi_lock::options::{BackendOptions, Options};
use dokebi_lock::policy::{Acquisition, Attempt, Found, MemberInfo, Next, Placement, Places, Router, Step, Tier};
use dokebi_lock::{ErrorCode, ForcedRelease, LockError};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;

use crate::error::{info, stash, ErrorInfo};
use crate::force_release::ForcedReleaseInfo;
use crate::store::LogEntry;
use crate::telemetry::{sink, TelemetryForwarder};

/// Calls the JS logger with one record; weak, so it never keeps Node alive.
pub type LogForwarder = ThreadsafeFunction<LogEntry, (), LogEntry, Status, false, true>;

/// The policy backend `name` of `options`, reporting through `log` and
/// `telemetry`; `None` (with the error stashed) when it is not one.
pub fn open(options: &Options, name: &str, places: &Places, log: LogForwarder, telemetry: TelemetryForwarder) -> Option<NativePolicy> {
    let Some(BackendOptions::Policy(policy)) = options.backends.get(name) else {
        stash(LockError::new(ErrorCode::UnknownBackend, "no policy backend of that name is configured"));
        return None;
    };
    let logger: Logger = Arc::new(move |record: &LogRecord| {
        if record.level >= Level::Warn {
            let entry = LogEntry {
                level: record.level.as_str().to_owned(),
                backend: record.backend.clone(),
                code: record.code.to_owned(),
                message: record.message.clone(),
            };
            log.call(entry, ThreadsafeFunctionCallMode::NonBlocking);
        }
    });
    let info_of = |member: &str| {
        let backend = &options.backends[member];
        (driver_name(backend), Tier::of(backend).expect("the options checked every member's tier"))
    };
    let router = Router::new(name, policy, places.clone(), info_of, logger, Some(sink(telemetry)));
    if router.members().len() as u64 >= PAUSED {
        stash(LockError::new(ErrorCode::InvalidOptions, format!("policy {name} names more than {} members", PAUSED - 1)));
        return None;
    }
    Some(NativePolicy { router: Arc::new(router), attempts: Slots::default(), placements: Slots::default() })
}

fn driver_name(backend: &BackendOptions) -> &'static str {
    match backend {
        BackendOptions::Local(_) => "local",
        BackendOptions::File(_) => "file",
        BackendOptions::Redis(_) => "redis",
        BackendOptions::Postgres(_) => "postgres",
        BackendOptions::Mysql(_) => "mysql",
        BackendOptions::Policy(_) | BackendOptions::App { .. } => unreachable!("not a policy member"),
    }
}

/// A member backend: its name, driver and tier.
#[napi(object)]
pub struct MemberJs {
    pub backend: String,
    pub driver: String,
    pub tier: String,
    /// Whether its leases carry fences (each comparable only with fences of
    /// the same member).
    pub fenced: bool,
}

fn member_js(member: &MemberInfo) -> MemberJs {
    MemberJs {
        backend: member.name.clone(),
        driver: member.driver.to_owned(),
        tier: member.tier.as_str().to_owned(),
        fenced: member.fences(),
    }
}

/// Which member served a lease, and when (ms since the Unix epoch).
#[napi(object)]
pub struct ServedJs {
    pub backend: String,
    pub driver: String,
    pub tier: String,
    pub fenced: bool,
    pub served_at_ms: f64,
}

fn served_js(acquisition: &Acquisition) -> ServedJs {
    let member = member_js(&acquisition.member);
    ServedJs {
        backend: member.backend,
        driver: member.driver,
        tier: member.tier,
        fenced: acquisition.fenced,
        served_at_ms: acquisition.at.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0),
    }
}

/// What the policy says of one key.
#[napi(object)]
pub struct KeyStatusJs {
    pub rule: String,
    pub pattern: Option<String>,
    pub backends: Vec<MemberJs>,
    pub min_tier: String,
    pub on_unavailable: String,
    pub last: Option<ServedJs>,
}

/// One member's counts in `status()`.
#[napi(object)]
pub struct MemberStatusJs {
    pub backend: String,
    pub driver: String,
    pub tier: String,
    pub served: f64,
    pub fallbacks: f64,
    pub refusals: f64,
    pub skipped: bool,
}

/// The bound on a policy's members that `begin`'s answer packs an acquire's
/// id above (options name at most a few; more are refused at open).
const MEMBERS: u64 = 65_536;

/// What `begin` answers in place of `member + 1` when the acquire pauses
/// first ([`Next::Pause`]), and so one more than the most members a policy
/// may have.
const PAUSED: u64 = MEMBERS - 1;

/// What `next_member` answers when the acquire pauses: it asks again after
/// `PAUSE` (see `npm/lib/policy.js`).
const PAUSE_NEXT: i32 = -2;

/// The decisions of one policy backend, and its acquires in progress.
#[napi]
pub struct NativePolicy {
    router: Arc<Router>,
    /// Acquires in progress by id (a JS number: no object per acquire).
    attempts: Slots<Attempt>,
    /// The placements of the leases granted and not yet left, by id.
    placements: Slots<Placement>,
}

/// Values by a JS number id; an id is free again once its value was taken.
struct Slots<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots { slots: Vec::new(), free: Vec::new() }
    }
}

impl<T> Slots<T> {
    fn put(&mut self, value: T) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(value);
                id
            }
            None => {
                self.slots.push(Some(value));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn get(&mut self, id: u32) -> &mut T {
        self.slots[id as usize].as_mut().expect("the JS layer uses an id until it ends")
    }

    fn take(&mut self, id: u32) -> T {
        let value = self.slots[id as usize].take().expect("the JS layer ends an id once");
        self.free.push(id);
        value
    }
}

#[napi]
impl NativePolicy {
    /// Each member, in the order tries index them.
    #[napi(catch_unwind)]
    pub fn members(&self) -> Vec<MemberJs> {
        self.router.members().iter().map(|member| member_js(member)).collect()
    }

    /// The policy's default wait, across every member tried.
    #[napi(getter)]
    pub fn wait_timeout_ms(&self) -> u32 {
        u32::try_from(self.router.wait_timeout().as_millis()).unwrap_or(u32::MAX)
    }

    /// Starts an acquire of `keys` and picks its first member, in one call
    /// (each call costs hundreds of ns): `id * MEMBERS + member + 1`, with
    /// `member + 1` 0 when no member is left to try and `PAUSED` when the
    /// acquire pauses first (see `MEMBERS` in `npm/lib/policy.js`); -1 when
    /// the keys fall under several rules (see `takeError`). The acquire ends
    /// with `served`, `refusal`, or a `failed` that answers false.
    #[napi(catch_unwind)]
    pub fn begin(&mut self, keys: Vec<String>) -> f64 {
        let rule = {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            self.router.rule_of_all(&keys)
        };
        let rule = match rule {
            Ok(rule) => rule,
            Err(error) => {
                stash(error);
                return -1.0;
            }
        };
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let mut attempt = self.router.attempt(rule, &keys);
        let first = match attempt.next_member() {
            Next::Member(member) => member as u64 + 1,
            Next::Pause(_) => PAUSED,
            Next::Refused => 0,
        };
        let id = self.attempts.put(attempt);
        (u64::from(id) * MEMBERS + first) as f64
    }

    /// The index of the next member acquire `id` tries, -1 when none is
    /// left, or `PAUSE_NEXT` when it pauses for `pauseMs` and asks again.
    #[napi(catch_unwind)]
    pub fn next_member(&mut self, id: u32) -> i32 {
        match self.attempts.get(id).next_member() {
            Next::Member(member) => member as i32,
            Next::Pause(_) => PAUSE_NEXT,
            Next::Refused => -1,
        }
    }

    /// Acquire `id` ends without a member's answer (its signal aborted it
    /// while it paused).
    #[napi(catch_unwind)]
    pub fn abandon(&mut self, id: u32) {
        drop(self.attempts.take(id));
    }

    /// How long an acquire pauses before it asks `next_member` again.
    #[napi(getter)]
    pub fn pause_ms(&self) -> u32 {
        dokebi_lock::policy::PAUSE.as_millis() as u32
    }

    /// The try of member `member` failed with the error `code` (`message`
    /// and `details` as the member's error said them: only
    /// `details.unreachable` tells a store that may be down): true when
    /// acquire `id` moves on to the next member, false when this error ends
    /// it (and the acquire with it).
    #[napi(catch_unwind)]
    pub fn failed(&mut self, id: u32, member: u32, code: String, message: String, details: Option<serde_json::Value>) -> bool {
        // An error the core does not know (an app's, a TypeError) is no unavailability.
        let step = match ErrorCode::from_name(&code) {
            Some(code) => {
                let error = LockError::new(code, message);
                let error = match details {
                    Some(details) => error.with_details(details),
                    None => error,
                };
                self.attempts.get(id).failed(member as usize, &error)
            }
            None => Step::Stop,
        };
        if step == Step::Stop {
            self.attempts.take(id);
        }
        step == Step::Next
    }

    /// Member `member` granted acquire `id`: counted, remembered, reported.
    /// Answers the id of the lease's placement, which `left` ends once the
    /// lease is released: until then its keys are tried on `member` only.
    #[napi(catch_unwind)]
    pub fn served(&mut self, id: u32, member: u32) -> u32 {
        let (_, placement) = self.attempts.take(id).served(member as usize);
        self.placements.put(placement)
    }

    /// The lease of placement `placement` no longer holds its keys.
    #[napi(catch_unwind)]
    pub fn left(&mut self, placement: u32) {
        self.placements.take(placement);
    }

    /// The `NO_ELIGIBLE_BACKEND` error of acquire `id`, which no member served.
    #[napi(catch_unwind)]
    pub fn refusal(&mut self, id: u32) -> ErrorInfo {
        info(self.attempts.take(id).refusal())
    }

    /// The rule of `key` and its last acquisition through this policy.
    #[napi(catch_unwind)]
    pub fn key_status(&self, key: String) -> KeyStatusJs {
        let status = self.router.key_status(&key);
        KeyStatusJs {
            rule: status.rule,
            pattern: status.pattern,
            backends: status.backends.iter().map(member_js).collect(),
            min_tier: status.min_tier.as_str().to_owned(),
            on_unavailable: status.on_unavailable.as_str().to_owned(),
            last: status.last.as_ref().map(served_js),
        }
    }

    /// Each member's counts and whether it is skipped now.
    #[napi(catch_unwind)]
    pub fn member_status(&self) -> Vec<MemberStatusJs> {
        self.router
            .member_status()
            .into_iter()
            .map(|status| {
                let member = member_js(&status.member);
                MemberStatusJs {
                    backend: member.backend,
                    driver: member.driver,
                    tier: member.tier,
                    served: status.counts.served as f64,
                    fallbacks: status.counts.fallbacks as f64,
                    refusals: status.counts.refusals as f64,
                    skipped: status.skipped,
                }
            })
            .collect()
    }
}

/// Which member answers a policy's `inspect(key)`, from each member's
/// answer in its rule's order (2: the key is held there, 1: acquires wait
/// for it there, 0: free there, `null`: the member failed): see
/// `policy::inspection_choice`.
#[napi(catch_unwind)]
pub fn inspection_choice(answers: Vec<Option<u32>>) -> Option<u32> {
    let found: Vec<Option<Found>> = answers
        .iter()
        .map(|answer| {
            answer.map(|seen| match seen {
                0 => Found::Free,
                1 => Found::Waited,
                _ => Found::Held,
            })
        })
        .collect();
    dokebi_lock::policy::inspection_choice(&found).map(|index| index as u32)
}

/// A policy's `forceRelease(key)` answer, from each member's in its rule's
/// order: see `policy::forced_release_of`. `null` (the error in
/// `takeError()`) when a member's answer has a fence that is not a decimal
/// string.
#[napi(catch_unwind)]
pub fn forced_release_of(answers: Vec<ForcedReleaseInfo>) -> Option<ForcedReleaseInfo> {
    match answers.into_iter().map(ForcedRelease::try_from).collect() {
        Ok(broken) => dokebi_lock::policy::forced_release_of(broken).map(ForcedReleaseInfo::from),
        Err(error) => {
            stash(error);
            None
        }
    }
}
