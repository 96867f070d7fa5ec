//! The policy's decisions, apart from any lease: which rule a key falls
//! under, which member backend to try next, whether a failure moves the
//! acquire on, and what to count, report and remember. The Rust backend
//! (`backend.rs`) and the Node surface drive the same [`Attempt`], each with
//! its own member backends, so the behaviour exists once.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use super::pattern::Pattern;
use super::tier::{OnUnavailable, Tier};
use crate::error::{ErrorCode, LockError};
use crate::log::{Level, LogRecord, Logger};
use crate::options::{PolicyOptions, RuleOptions};
use crate::telemetry::{Telemetry, TelemetryEvent};

/// How many keys' last acquisitions a policy remembers; past it the
/// oldest entries are forgotten.
pub const REMEMBERED_KEYS: usize = 10_000;

/// One member backend, as the policy knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// The backend's name in the configuration.
    pub name: String,
    /// Its driver (`local`, `file`, `redis`, `postgres`).
    pub driver: &'static str,
    /// What it can promise.
    pub tier: Tier,
}

impl MemberInfo {
    /// Whether its leases carry fences: every built-in driver's do, each
    /// comparable only with fences of the same backend.
    pub fn fences(&self) -> bool {
        true
    }
}

/// One rule, its backends resolved to member indexes.
#[derive(Debug, Clone)]
pub struct Rule {
    /// `rules[<i>]` or `default`: how reports name it (never by a key).
    pub label: String,
    /// The keys it takes; `None` for the default rule.
    pub pattern: Option<Pattern>,
    /// The members that may serve it, preferred first.
    pub members: Vec<usize>,
    /// The lowest tier that may serve it.
    pub min_tier: Tier,
    /// What happens while its first member cannot serve.
    pub on_unavailable: OnUnavailable,
}

/// What one member has done, for `status()`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemberCounts {
    /// Acquires it served.
    pub served: u64,
    /// Of those, the ones whose rule prefers another member.
    pub fallbacks: u64,
    /// Acquires refused with `NO_ELIGIBLE_BACKEND` whose rule prefers it.
    pub refusals: u64,
}

/// A member's state in a status snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// Who it is.
    pub member: MemberInfo,
    /// What it has done.
    pub counts: MemberCounts,
    /// It was found unavailable and is passed over until its cooldown ends.
    pub skipped: bool,
}

/// Which member served a key, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquisition {
    /// The member that granted it (shared: a grant copies no name).
    pub member: Arc<MemberInfo>,
    /// Whether that member's leases carry fences.
    pub fenced: bool,
    /// When it was granted.
    pub at: SystemTime,
}

/// What the policy says of one key: its rule and its last acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyStatus {
    /// The rule's label (`rules[<i>]` or `default`).
    pub rule: String,
    /// The rule's pattern, as `prefix:<text>` or `glob:<text>`; `None` for
    /// the default rule.
    pub pattern: Option<String>,
    /// The members the rule allows, preferred first.
    pub backends: Vec<MemberInfo>,
    /// The rule's minimum tier.
    pub min_tier: Tier,
    /// What the rule does while its preferred member cannot serve.
    pub on_unavailable: OnUnavailable,
    /// The last acquisition of the key through this policy, if remembered.
    pub last: Option<Acquisition>,
}

/// A member found unavailable: passed over until `retry_at`.
#[derive(Debug, Clone)]
struct Skip {
    since: Instant,
    retry_at: Instant,
    code: ErrorCode,
    reason: String,
    /// The first fallback away from it was logged.
    fallback_logged: bool,
}

#[derive(Default)]
struct MemberState {
    skip: Option<Skip>,
    counts: MemberCounts,
}

/// The decisions of one policy backend, shared by its acquires.
pub struct Router {
    name: String,
    members: Vec<Arc<MemberInfo>>,
    rules: Vec<Rule>,
    cooldown: Duration,
    wait_timeout: Duration,
    states: Mutex<Vec<MemberState>>,
    acquisitions: Mutex<Acquisitions>,
    places: Places,
    logger: Logger,
    telemetry: Option<Telemetry>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router").field("name", &self.name).field("members", &self.members).finish_non_exhaustive()
    }
}

impl Router {
    /// The router of the policy backend `name`; `info_of(member)` gives
    /// each member's driver and tier (the options were checked: every
    /// member exists and has one). `places` is shared by every policy of
    /// the provider.
    pub fn new(
        name: &str,
        options: &PolicyOptions,
        places: Places,
        mut info_of: impl FnMut(&str) -> (&'static str, Tier),
        logger: Logger,
        telemetry: Option<Telemetry>,
    ) -> Router {
        let mut members: Vec<Arc<MemberInfo>> = Vec::new();
        let mut index_of = |member: &str| match members.iter().position(|m| m.name == member) {
            Some(index) => index,
            None => {
                let (driver, tier) = info_of(member);
                members.push(Arc::new(MemberInfo { name: member.to_owned(), driver, tier }));
                members.len() - 1
            }
        };
        let mut rule = |label: String, options: &RuleOptions| Rule {
            label,
            pattern: options.pattern.clone(),
            members: options.backends.iter().map(|member| index_of(member)).collect(),
            min_tier: options.min_tier,
            on_unavailable: options.on_unavailable,
        };
        let mut rules: Vec<Rule> = options.rules.iter().enumerate().map(|(i, options)| rule(format!("rules[{i}]"), options)).collect();
        rules.push(rule("default".into(), &options.default));
        let states = Mutex::new(members.iter().map(|_| MemberState::default()).collect());
        Router {
            name: name.to_owned(),
            members,
            rules,
            cooldown: Duration::from_millis(options.reprobe_cooldown_ms.into()),
            wait_timeout: Duration::from_millis(options.wait_timeout_ms.into()),
            states,
            acquisitions: Mutex::new(Acquisitions::default()),
            places,
            logger,
            telemetry,
        }
    }

    /// The policy backend's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every member, in the order [`Attempt::next_member`] indexes them.
    pub fn members(&self) -> &[Arc<MemberInfo>] {
        &self.members
    }

    /// Every rule, in the order [`Router::rule_of`] indexes them: the
    /// options' `rules`, then the default rule.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The policy's default wait, across every member tried.
    pub fn wait_timeout(&self) -> Duration {
        self.wait_timeout
    }

    /// The rule `key` falls under: the first whose pattern matches, else
    /// the default.
    pub fn rule_of(&self, key: &str) -> usize {
        let last = self.rules.len() - 1;
        self.rules[..last].iter().position(|rule| rule.pattern.as_ref().is_some_and(|p| p.matches(key))).unwrap_or(last)
    }

    /// The rule of a lease over `keys`: they must all fall under one
    /// (`INVALID_ARGUMENT` otherwise, naming the rules, not the keys).
    pub fn rule_of_all(&self, keys: &[&str]) -> Result<usize, LockError> {
        let first = self.rule_of(keys.first().copied().unwrap_or_default());
        match keys.iter().position(|key| self.rule_of(key) != first) {
            None => Ok(first),
            Some(index) => Err(LockError::new(
                ErrorCode::InvalidArgument,
                format!(
                    "keys[{index}] falls under {} of policy {} and keys[0] under {}: the keys of one lease must fall under one rule",
                    self.rules[self.rule_of(keys[index])].label,
                    self.name,
                    self.rules[first].label
                ),
            )),
        }
    }

    /// An acquire of `keys` under their rule `rule` (see
    /// [`Router::rule_of_all`]) starts.
    pub fn attempt(self: &Arc<Self>, rule: usize, keys: &[&str]) -> Attempt {
        let keys = keys.iter().map(|&key| key.into()).collect();
        Attempt { router: self.clone(), rule, keys, position: 0, tried: Vec::new(), placement: None, went_to: None, paused_on: None }
    }

    /// What the policy says of `key`.
    pub fn key_status(&self, key: &str) -> KeyStatus {
        let rule = &self.rules[self.rule_of(key)];
        KeyStatus {
            rule: rule.label.clone(),
            pattern: rule.pattern.as_ref().map(Pattern::describe),
            backends: rule.members.iter().map(|&m| MemberInfo::clone(&self.members[m])).collect(),
            min_tier: rule.min_tier,
            on_unavailable: rule.on_unavailable,
            last: lock(&self.acquisitions).get(key),
        }
    }

    /// Every member's counts and whether it is skipped now.
    pub fn member_status(&self) -> Vec<MemberStatus> {
        let now = Instant::now();
        let states = lock(&self.states);
        self.members
            .iter()
            .zip(states.iter())
            .map(|(member, state)| MemberStatus {
                member: MemberInfo::clone(member),
                counts: state.counts.clone(),
                skipped: state.skip.as_ref().is_some_and(|skip| skip.retry_at > now),
            })
            .collect()
    }

    fn log(&self, code: &'static str, message: String) {
        (self.logger)(&LogRecord { level: Level::Warn, backend: self.name.clone(), code, message });
    }

    fn event(&self, event: TelemetryEvent) {
        if let Some(telemetry) = &self.telemetry {
            telemetry.event(&event);
        }
    }

    /// The member of this policy named `name` when it could not serve at
    /// its last try and has not served since (in its cooldown, or being
    /// probed).
    fn down(&self, name: &str) -> Option<usize> {
        let member = self.members.iter().position(|member| member.name == name)?;
        lock(&self.states)[member].skip.is_some().then_some(member)
    }

    /// `member` answered (served, or refused for contention): if it was
    /// skipped, it is back.
    fn reachable(&self, states: &mut [MemberState], member: usize) {
        let Some(skip) = states[member].skip.take() else { return };
        let name = &self.members[member].name;
        let skipped = skip.since.elapsed();
        self.log("LOCK_POLICY_BACK", format!("backend {name} serves again after {} ms unavailable", skipped.as_millis()));
        self.event(TelemetryEvent::PolicyBack { backend: self.name.clone(), member: name.clone(), skipped });
    }

    /// `member` could not serve: passed over for the cooldown.
    fn unavailable(&self, states: &mut [MemberState], member: usize, error: &LockError) {
        let now = Instant::now();
        let (code, reason) = (error.code(), error.message().to_owned());
        match &mut states[member].skip {
            // A probe after the cooldown failed again: another cooldown.
            Some(skip) => {
                skip.retry_at = now + self.cooldown;
                skip.reason = reason;
            }
            None => {
                let name = &self.members[member].name;
                self.log(
                    "LOCK_POLICY_SKIPPED",
                    format!("backend {name} is unavailable ({code}: {reason}); it is tried again after {} ms", self.cooldown.as_millis()),
                );
                self.event(TelemetryEvent::PolicySkipped {
                    backend: self.name.clone(),
                    member: name.clone(),
                    code,
                    reason: reason.clone(),
                });
                states[member].skip = Some(Skip { since: now, retry_at: now + self.cooldown, code, reason, fallback_logged: false });
            }
        }
    }
}

/// Why a member tried (or passed over) did not serve.
#[derive(Debug, Clone)]
struct Tried {
    member: usize,
    code: ErrorCode,
    reason: String,
    /// Passed over in its cooldown, not tried: retried after this long.
    retry_in: Option<Duration>,
}

/// One acquire's way through its rule's members.
pub struct Attempt {
    router: Arc<Router>,
    rule: usize,
    keys: Arc<[Box<str>]>,
    position: usize,
    tried: Vec<Tried>,
    /// The member being tried, entered in the router's places.
    placement: Option<Placement>,
    /// The member a key of this acquire was found on, and the acquire went
    /// to (and could not be served there).
    went_to: Option<usize>,
    /// The member whose tries of this process this acquire last paused
    /// for ([`Next::Pause`]).
    paused_on: Option<usize>,
}

/// How long an acquire pauses before it looks again whether this
/// process's tries of its keys on a member that is down have ended.
pub const PAUSE: Duration = Duration::from_millis(10);

/// What an acquire does next ([`Attempt::next_member`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Try this member.
    Member(usize),
    /// Ask again after this long (or once the acquire's wait is over:
    /// then its error is [`Attempt::refusal`]), without trying anything.
    Pause(Duration),
    /// No member is left: the acquire's error is [`Attempt::refusal`].
    Refused,
}

/// What a failed try means for the acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The member is unavailable: ask [`Attempt::next_member`] for another.
    Next,
    /// The error ends the acquire, as it is.
    Stop,
}

impl Attempt {
    /// The next member to try, or `None` when none is left (then
    /// [`Attempt::refusal`] is the acquire's error). A member in its
    /// cooldown is passed over; the first acquire after the cooldown tries
    /// it (and the others go on passing it over while that try runs). A
    /// rule that fails closed has only its first member.
    ///
    /// A key this process holds on a member (or is acquiring there) is
    /// tried on that member only, whatever the order: granted on another,
    /// it would have two holders in this very process, for as long as the
    /// first lease lives (review R8: the preferred member back from its
    /// cooldown while a lease on the fallback is renewed). It waits there
    /// for its own lease as for anyone's.
    ///
    /// Where a key has only tries (no lease) on a member that could not
    /// serve at its last try (unreachable; in its cooldown, or being
    /// probed), the acquire pauses ([`Next::Pause`]) instead of joining them
    /// there or being refused: those tries end within their member's own
    /// bounds (they fail as the last did, or are granted), and then it
    /// follows the rule's order, or goes where they were granted. A lease
    /// never makes it pause: that may last as long as its holder likes (a
    /// nested read, review R41); nor does a try that went there for a lease
    /// (it may wait for this acquire's own, review R43).
    pub fn next_member(&mut self) -> Next {
        self.placement = None;
        let router = self.router.clone();
        let rule = &router.rules[self.rule];
        let mut places = router.places.lock();
        let found = places.of(&self.keys);
        // Only tries there, on a member that could not serve at its last
        // try: they end within its bounds, then this acquire looks again
        // (keys found on two members may meet on one by then). Not tries
        // that went there for a lease of theirs: they may wait for this
        // process's own holders, this acquire's among them (review R43).
        if let Some(member) = found.iter().filter(|place| !place.leased && place.tried).find_map(|place| router.down(&place.member.name)) {
            self.went_to = None;
            self.paused_on = Some(member);
            return Next::Pause(PAUSE);
        }
        self.paused_on = None;
        match found.as_slice() {
            [] => {}
            [place] => {
                let member = rule.members.iter().copied().find(|&member| router.members[member].name == place.member.name);
                match member {
                    // Found there (again, after this acquire's try on another
                    // member failed: another acquire went on to it first).
                    Some(member) if self.went_to != Some(member) => {
                        self.went_to = Some(member);
                        return Next::Member(self.enter(&mut places, member, place.leased));
                    }
                    // Tried there, and it could not serve: no other member may.
                    Some(member) => self.refuse(member, "this process holds the key there, or is acquiring it".to_owned()),
                    // Through another policy, on a member this rule does not allow.
                    None => self.refuse(
                        rule.members[0],
                        format!("this process holds the key on backend {}, which this rule does not allow", place.member.name),
                    ),
                }
                return Next::Refused;
            }
            _ => {
                self.refuse(rule.members[0], "this process holds some of the keys on one member and others on another".to_owned());
                return Next::Refused;
            }
        }
        let last = match rule.on_unavailable {
            OnUnavailable::FailClosed => 1,
            OnUnavailable::FallBack => rule.members.len(),
        };
        let now = Instant::now();
        let mut states = lock(&router.states);
        while self.position < last {
            let member = rule.members[self.position];
            self.position += 1;
            match &mut states[member].skip {
                Some(skip) if skip.retry_at > now => {
                    self.tried.push(Tried { member, code: skip.code, reason: skip.reason.clone(), retry_in: Some(skip.retry_at - now) })
                }
                Some(skip) => {
                    // This acquire probes it; the others wait another cooldown.
                    skip.retry_at = now + router.cooldown;
                    return Next::Member(self.enter(&mut places, member, false));
                }
                None => return Next::Member(self.enter(&mut places, member, false)),
            }
        }
        Next::Refused
    }

    /// This acquire's keys are on `member` while it tries there
    /// (`queued`: because some of them are leased there).
    fn enter(&mut self, places: &mut PlaceMap, member: usize, queued: bool) -> usize {
        let stage = if queued { Stage::Queued } else { Stage::Tried };
        self.placement = Some(places.enter(&self.router.places, &self.keys, &self.router.members[member], stage));
        member
    }

    /// Its keys are held by this process where it may not go: `member`
    /// tells why, as contention does.
    fn refuse(&mut self, member: usize, reason: String) {
        self.tried.push(Tried { member, code: ErrorCode::LockBusy, reason, retry_in: None });
    }

    /// The try of `member` failed with `error`. Only a store that could not
    /// be reached ([`unreachable`]) moves on. Everything else ends the
    /// acquire: contention, limits, an abort, close and an unknown outcome,
    /// since another member would give a second holder, or might while the
    /// first try's grant stands; and a store that answered but refused this
    /// process (a busy script, a full memory, newer or missing functions, a
    /// session setting, credentials, a set-up lock) or whose connect was
    /// still under way: it is up, and may be serving the key's holder.
    pub fn failed(&mut self, member: usize, error: &LockError) -> Step {
        self.placement = None;
        let mut states = lock(&self.router.states);
        match error.code() {
            ErrorCode::ProviderFailed if unreachable(error) => {
                self.router.unavailable(&mut states, member, error);
                self.tried.push(Tried { member, code: error.code(), reason: error.message().to_owned(), retry_in: None });
                Step::Next
            }
            ErrorCode::LockBusy | ErrorCode::WaitTimeout | ErrorCode::KeyLimit | ErrorCode::QueueFull => {
                self.router.reachable(&mut states, member);
                Step::Stop
            }
            _ => Step::Stop,
        }
    }

    /// `member` granted the lease: counted, remembered, and reported when
    /// the rule prefers another member. The lease holds its [`Placement`]
    /// until it ends: until then its keys are tried on `member` only.
    pub fn served(mut self, member: usize) -> (Acquisition, Placement) {
        let mut placement = self.placement.take().expect("a member is served after next_member chose it, and before it failed");
        placement.lease();
        let router = &self.router;
        let rule = &router.rules[self.rule];
        let preferred = rule.members[0];
        let info = router.members[member].clone();
        {
            let mut states = lock(&router.states);
            router.reachable(&mut states, member);
            states[member].counts.served += 1;
            if member != preferred {
                states[member].counts.fallbacks += 1;
                let why = self.tried.iter().find(|t| t.member == preferred);
                let code = why.map_or(ErrorCode::ProviderFailed, |t| t.code);
                if let Some(skip) = states[preferred].skip.as_mut().filter(|skip| !skip.fallback_logged) {
                    skip.fallback_logged = true;
                    router.log(
                        "LOCK_POLICY_FALLBACK",
                        format!(
                            "{} keys move from {} to {} while it is unavailable",
                            rule.label, router.members[preferred].name, info.name
                        ),
                    );
                }
                router.event(TelemetryEvent::PolicyFallback {
                    backend: router.name.clone(),
                    preferred: router.members[preferred].name.clone(),
                    served: info.name.clone(),
                    code,
                });
            }
        }
        let acquisition = Acquisition { fenced: info.fences(), member: info, at: SystemTime::now() };
        let mut remembered = lock(&router.acquisitions);
        for key in self.keys.iter() {
            remembered.put(key, acquisition.clone());
        }
        (acquisition, placement)
    }

    /// The acquire's error when no member served: `NO_ELIGIBLE_BACKEND`,
    /// whose details list every member tried or passed over and why
    /// (never the key).
    pub fn refusal(mut self) -> LockError {
        if let Some(member) = self.paused_on.take() {
            // Its wait ended while it paused for this process's tries there.
            self.refuse(
                member,
                "this process is acquiring the key there, which is unavailable now; the wait ended before those tries did".to_owned(),
            );
        }
        let router = &self.router;
        let rule = &router.rules[self.rule];
        lock(&router.states)[rule.members[0]].counts.refusals += 1;
        crate::telemetry::policy_refused(&router.name, &router.members[rule.members[0]].name);
        let tried: Vec<_> = self
            .tried
            .iter()
            .map(|t| {
                let member = &router.members[t.member];
                json!({
                    "backend": member.name,
                    "driver": member.driver,
                    "tier": member.tier.as_str(),
                    "code": t.code.as_str(),
                    "reason": t.reason,
                    "skipped": t.retry_in.is_some(),
                    "retryInMs": t.retry_in.map(|d| d.as_millis() as u64),
                })
            })
            .collect();
        let why: Vec<String> = self.tried.iter().map(|t| format!("{}: {}", router.members[t.member].name, t.reason)).collect();
        let names: Vec<&str> = self.tried.iter().map(|t| router.members[t.member].name.as_str()).collect();
        let change = match rule.on_unavailable {
            OnUnavailable::FailClosed => "onUnavailable: fallBack with a second backend",
            OnUnavailable::FallBack => "another backend",
        };
        LockError::new(
            ErrorCode::NoEligibleBackend,
            format!(
                "no backend {} of policy {} allows (minimum tier {}, {}) could serve the key: {}",
                rule.label,
                router.name,
                rule.min_tier.as_str(),
                rule.on_unavailable.as_str(),
                why.join("; ")
            ),
        )
        .with_fix(format!(
            "Start or repair {} (details.tried says why each could not serve), or, if these keys may live elsewhere, give {} of policy {} {change} at or above its minTier; it is retried {} ms after it failed.",
            names.join(" and "),
            rule.label,
            router.name,
            router.cooldown.as_millis()
        ))
        .with_details(json!({
            "backend": router.name,
            "rule": rule.label,
            "minTier": rule.min_tier.as_str(),
            "onUnavailable": rule.on_unavailable.as_str(),
            "tried": tried,
        }))
    }
}

/// Where a provider's keys are held through its policies: per key, the one
/// member (by name: the policies index their members apart) its live leases
/// and its tries in progress are on, and how many there are. Shared by
/// every policy backend of one provider: two policies over one member are
/// one process's holders too (review R38).
#[derive(Clone, Default)]
pub struct Places(Arc<Mutex<PlaceMap>>);

impl std::fmt::Debug for Places {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Places").finish_non_exhaustive()
    }
}

impl Places {
    fn lock(&self) -> MutexGuard<'_, PlaceMap> {
        lock(&self.0)
    }
}

#[derive(Default)]
struct PlaceMap(HashMap<Box<str>, Place>);

/// Where one key is: its member, and how many tries and leases of this
/// process it has there, by [`Stage`].
struct Place {
    member: Arc<MemberInfo>,
    /// By `Stage as usize`.
    count: [usize; 3],
}

/// What a [`Placement`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// A try that went to its member by the rule's order, or to join tries.
    Tried,
    /// A try that went to its member because some of its keys are leased
    /// there: it may be waiting for this process's own holders.
    Queued,
    /// A lease.
    Leased,
}

/// The member some keys are on: whether any of them is leased there, and
/// whether any has a try there that did not go for a lease.
struct Found {
    member: Arc<MemberInfo>,
    leased: bool,
    tried: bool,
}

impl PlaceMap {
    /// The members some of `keys` are on, each once.
    fn of(&self, keys: &[Box<str>]) -> Vec<Found> {
        let mut on: Vec<Found> = Vec::new();
        for place in keys.iter().filter_map(|key| self.0.get(key)) {
            let (leased, tried) = (place.count[Stage::Leased as usize] > 0, place.count[Stage::Tried as usize] > 0);
            match on.iter_mut().find(|found| found.member.name == place.member.name) {
                Some(found) => {
                    found.leased |= leased;
                    found.tried |= tried;
                }
                None => on.push(Found { member: place.member.clone(), leased, tried }),
            }
        }
        on
    }

    /// A try of `keys` on `member`, where those of them that are anywhere
    /// are ([`PlaceMap::of`]).
    fn enter(&mut self, places: &Places, keys: &Arc<[Box<str>]>, member: &Arc<MemberInfo>, stage: Stage) -> Placement {
        for key in keys.iter() {
            self.0.entry(key.clone()).or_insert_with(|| Place { member: member.clone(), count: [0; 3] }).count[stage as usize] += 1;
        }
        Placement { places: places.clone(), keys: keys.clone(), stage }
    }

    /// `keys`, placed at stage `from`, are at stage `to` now.
    fn advance(&mut self, keys: &[Box<str>], from: Stage, to: Stage) {
        for key in keys {
            if let Some(place) = self.0.get_mut(key) {
                place.count[from as usize] -= 1;
                place.count[to as usize] += 1;
            }
        }
    }

    /// A try or a lease of `keys`, at stage `stage`, ended.
    fn leave(&mut self, keys: &[Box<str>], stage: Stage) {
        for key in keys {
            if let Some(place) = self.0.get_mut(key) {
                place.count[stage as usize] -= 1;
                if place.count.iter().all(|&count| count == 0) {
                    self.0.remove(key);
                }
            }
        }
    }
}

/// A lease's keys (or a try's) on one member: every policy of the provider
/// sends the acquires of them there while it lives
/// ([`Attempt::next_member`]).
pub struct Placement {
    places: Places,
    keys: Arc<[Box<str>]>,
    stage: Stage,
}

impl Placement {
    /// The try was granted: its keys are a lease's now.
    fn lease(&mut self) {
        if self.stage != Stage::Leased {
            self.places.lock().advance(&self.keys, self.stage, Stage::Leased);
            self.stage = Stage::Leased;
        }
    }
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement").finish_non_exhaustive()
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        self.places.lock().leave(&self.keys, self.stage);
    }
}

/// The last acquisition of up to [`REMEMBERED_KEYS`] keys, the oldest
/// forgotten first.
#[derive(Default)]
struct Acquisitions {
    by_key: HashMap<Box<str>, Acquisition>,
    order: VecDeque<Box<str>>,
}

impl Acquisitions {
    fn put(&mut self, key: &str, acquisition: Acquisition) {
        if let Some(entry) = self.by_key.get_mut(key) {
            *entry = acquisition;
            return;
        }
        if self.order.len() == REMEMBERED_KEYS {
            if let Some(oldest) = self.order.pop_front() {
                self.by_key.remove(&oldest);
            }
        }
        self.order.push_back(key.into());
        self.by_key.insert(key.into(), acquisition);
    }

    fn get(&self, key: &str) -> Option<Acquisition> {
        self.by_key.get(key).cloned()
    }
}

/// A store's `PROVIDER_FAILED` that says no connection to it could be made
/// (`details.unreachable`): the one failure that does not show the store
/// up; every other one came from a store that answered.
pub fn unreachable(error: &LockError) -> bool {
    error.details().and_then(|details| details.get("unreachable")).and_then(serde_json::Value::as_bool) == Some(true)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
