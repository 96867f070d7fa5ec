//! Telemetry: measurements worth observing that are not failures (slow
//! acquires, slow holds, wait timeouts, lost leases, Redis connectivity, a
//! Redis server's clock found behind, an operator's forced release).
//!
//! It has its own channel, separate from errors and the log: an error
//! reporter expects every record to be a failure, and a contention measurement
//! reported as an error would turn into a bug report on every occurrence.
//! Events carry the backend name, codes and durations, never keys.
//!
//! Besides those threshold events, a sink may ask for a trace event per
//! acquire and per hold ([`TraceEvent`], see [`TelemetrySink::interest`]),
//! for hosts that feed their own tracer; nobody gets them unasked, so a
//! sink that only alerts pays nothing per acquire. With the cargo feature
//! `tracing` every acquire and hold is also a span of the `tracing` crate
//! (see `trace.rs`); with the cargo feature `metrics`, every acquire, hold
//! and event is measured through the `metrics` crate (see `metrics.rs`).
//! Drivers report all of it through one `Reporter`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::{AcquireOptions, LockKind, LockMode};
use crate::error::{ErrorCode, LockError};
use crate::inspect::tells_holders;
use crate::metrics::{self, AcquireMeter, HoldMeter, Meter};
use crate::options::Thresholds;
use crate::trace::{AcquireSpan, HoldSpan};

/// One telemetry event.
#[derive(Debug, Clone, PartialEq)]
pub enum TelemetryEvent {
    /// An acquire waited at least `slowAcquireMs`; `outcome` is `None` when it
    /// got the lease, else the error it ended with.
    SlowAcquire {
        /// The backend's name.
        backend: String,
        /// How long the acquire waited.
        waited: Duration,
        /// The `slowAcquireMs` it crossed.
        threshold: Duration,
        /// `None` when granted, else the code it failed with.
        outcome: Option<ErrorCode>,
        /// Of a `WAIT_TIMEOUT` or `LOCK_BUSY`: its `details`, the holders
        /// of the key that kept the acquire out (see docs/locks.md, "Who
        /// holds it"), when they could be read.
        details: Option<serde_json::Value>,
    },
    /// A lease was held at least `slowHoldMs` when it ended.
    SlowHold {
        /// The backend's name.
        backend: String,
        /// How long the lease was held.
        held: Duration,
        /// The `slowHoldMs` it crossed.
        threshold: Duration,
    },
    /// An acquire gave up waiting (`WAIT_TIMEOUT`).
    WaitTimeout {
        /// The backend's name.
        backend: String,
        /// How long the acquire waited.
        waited: Duration,
        /// The error's `details`: the holders of the key that kept the
        /// acquire out, when they could be read.
        details: Option<serde_json::Value>,
    },
    /// A lease turned out lost (`LEASE_LOST` or `OUTCOME_UNKNOWN`).
    LeaseLost {
        /// The backend's name.
        backend: String,
        /// `LEASE_LOST` or `OUTCOME_UNKNOWN`.
        code: ErrorCode,
    },
    /// A Redis or PostgreSQL connection went up (answered) or down (could
    /// not be reached, or its answer was lost).
    Connection {
        /// The connection's name.
        connection: String,
        /// True when it came up, false when it went down.
        up: bool,
    },
    /// A Redis server granted a fence at least a second below one the
    /// connection was granted before the request was sent: its clock is at
    /// least `behind` behind the latest server time seen (a primary promoted
    /// with a clock behind the old one's). Fences never repeat while that
    /// stays under `fence_retention`; past it they can. At most one every 10
    /// s per connection; the log says so too (`REDIS_CLOCK_BEHIND`).
    ClockBehind {
        /// The backend whose grant showed it.
        backend: String,
        /// Its connection's name.
        connection: String,
        /// How far the server's clock is at least behind.
        behind: Duration,
        /// The backend's `fenceRetentionMs`.
        fence_retention: Duration,
    },
    /// A key was force-released (`Backend::force_release`): every holder
    /// removed at once. Reported by the backend whose holders it removed (a
    /// policy's members each report their own), also when it found none.
    ForcedRelease {
        /// The backend's name.
        backend: String,
        /// The live holders it removed (0 when the key was free).
        removed: u32,
        /// The key's fence counter as raised; `None` on the local driver.
        fence: Option<u64>,
    },
    /// A policy backend's acquire was served by a member other than its
    /// rule's preferred one, which could not serve.
    PolicyFallback {
        /// The policy backend's name.
        backend: String,
        /// The rule's preferred member.
        preferred: String,
        /// The member that served.
        served: String,
        /// Why the preferred member did not serve (`PROVIDER_FAILED`).
        code: ErrorCode,
    },
    /// A policy's member was found unavailable: acquires pass it over
    /// until its `reprobeCooldownMs` ends.
    PolicySkipped {
        /// The policy backend's name.
        backend: String,
        /// The member found unavailable.
        member: String,
        /// The code of its failure.
        code: ErrorCode,
        /// The failure's message (never a key).
        reason: String,
    },
    /// A member skipped before answered again (it served, or found the key
    /// held): acquires use it again.
    PolicyBack {
        /// The policy backend's name.
        backend: String,
        /// The member that came back.
        member: String,
        /// How long it was skipped.
        skipped: Duration,
    },
}

impl TelemetryEvent {
    /// The channel suffix surfaces publish under (`dokebi-lock:<name>`).
    pub fn name(&self) -> &'static str {
        match self {
            TelemetryEvent::SlowAcquire { .. } => "slow-acquire",
            TelemetryEvent::SlowHold { .. } => "slow-hold",
            TelemetryEvent::WaitTimeout { .. } => "wait-timeout",
            TelemetryEvent::LeaseLost { .. } => "lease-lost",
            TelemetryEvent::Connection { .. } => "connection",
            TelemetryEvent::ClockBehind { .. } => "clock-behind",
            TelemetryEvent::ForcedRelease { .. } => "forced-release",
            TelemetryEvent::PolicyFallback { .. } => "policy-fallback",
            TelemetryEvent::PolicySkipped { .. } => "policy-skipped",
            TelemetryEvent::PolicyBack { .. } => "policy-back",
        }
    }
}

/// Receives telemetry; called on whichever thread observed the event. A
/// closure `|event: &TelemetryEvent| ..` is a sink of the threshold events.
pub type Telemetry = Arc<dyn TelemetrySink>;

/// Where telemetry goes: the threshold events, and the trace events the
/// sink asks for.
pub trait TelemetrySink: Send + Sync {
    /// A threshold or failure event.
    fn event(&self, event: &TelemetryEvent);

    /// The trace events this sink receives; asked once, when the provider
    /// opens. None by default: a trace event per acquire costs a call.
    fn interest(&self) -> Interest {
        Interest::NONE
    }

    /// An acquire or a hold, of the kinds [`TelemetrySink::interest`] asked for.
    fn trace(&self, event: &TraceEvent<'_>) {
        let _ = event;
    }
}

impl<F: Fn(&TelemetryEvent) + Send + Sync> TelemetrySink for F {
    fn event(&self, event: &TelemetryEvent) {
        self(event)
    }
}

/// The sink a provider hands its drivers for the host's `telemetry`: with
/// the cargo feature `metrics`, one that every event passes, host's sink or
/// none, to be measured; without it, the host's.
pub(crate) fn measured(telemetry: Option<Telemetry>) -> Option<Telemetry> {
    if !metrics::RECORDING {
        return telemetry;
    }
    Some(Arc::new(Measured(telemetry)))
}

/// Measures each event, then hands it to the host's sink, if any.
struct Measured(Option<Telemetry>);

impl TelemetrySink for Measured {
    fn event(&self, event: &TelemetryEvent) {
        metrics::event(event);
        if let Some(telemetry) = &self.0 {
            telemetry.event(event);
        }
    }

    fn interest(&self) -> Interest {
        self.0.as_ref().map_or(Interest::NONE, |telemetry| telemetry.interest())
    }

    fn trace(&self, event: &TraceEvent<'_>) {
        if let Some(telemetry) = &self.0 {
            telemetry.trace(event);
        }
    }
}

/// A policy `backend` refused an acquire (`NO_ELIGIBLE_BACKEND`) whose rule
/// prefers `member`: measured with the cargo feature `metrics` (it is no
/// member's acquire, and no event).
pub(crate) fn policy_refused(backend: &str, member: &str) {
    metrics::policy_refused(backend, member);
}

/// Which trace events a sink receives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Interest {
    /// [`TraceEvent::Acquire`], one per acquire call.
    pub acquires: bool,
    /// [`TraceEvent::Hold`], one per granted lease when its hold ends.
    pub holds: bool,
}

impl Interest {
    /// No trace events (the threshold events only).
    pub const NONE: Interest = Interest { acquires: false, holds: false };
    /// Every acquire and every hold.
    pub const ALL: Interest = Interest { acquires: true, holds: true };
}

/// One acquire or one hold, for a host's own tracer: counts, codes and
/// durations, never keys. The `tracing` spans carry the same fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceEvent<'a> {
    /// An acquire call ended: granted, or failed with `outcome`. A Rust
    /// acquire future dropped before it ended reports nothing.
    #[non_exhaustive]
    Acquire {
        /// The backend's name.
        backend: &'a str,
        /// Its driver: `"local"` or `"redis"`.
        driver: &'static str,
        /// The mode asked for.
        mode: LockMode,
        /// The limit asked for (1 unless counted).
        limit: u32,
        /// The weight asked for (1 unless counted).
        weight: u32,
        /// How many keys, taken as one lease.
        key_count: usize,
        /// From the call to its outcome.
        waited: Duration,
        /// `None` when granted, else the code it failed with.
        outcome: Option<ErrorCode>,
        /// The lease's fence (of its first key) when granted.
        fence: Option<u64>,
    },
    /// A granted lease stopped being held: released (by its owner, on drop
    /// or by close), or found lost.
    #[non_exhaustive]
    Hold {
        /// The backend's name.
        backend: &'a str,
        /// Its driver: `"local"` or `"redis"`.
        driver: &'static str,
        /// The lease's fence (of its first key).
        fence: u64,
        /// From the grant to the end.
        held: Duration,
        /// `None` when released; `LEASE_LOST` or `OUTCOME_UNKNOWN` when
        /// found lost, the release's error when it failed otherwise, and
        /// `CLOSED` for a local lease whose backend closed under it.
        outcome: Option<ErrorCode>,
    },
}

/// What an acquire asks for, as telemetry reports it (never the keys).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub mode: LockMode,
    pub limit: u32,
    pub weight: u32,
    pub key_count: usize,
}

impl Shape {
    /// As asked, before the options are checked.
    pub fn asked(options: &AcquireOptions, key_count: usize) -> Shape {
        Shape { mode: options.mode, limit: options.limit.unwrap_or(1), weight: options.weight.unwrap_or(1), key_count }
    }

    /// Of a checked kind.
    pub fn of(kind: LockKind, key_count: usize) -> Shape {
        Shape { mode: kind.mode, limit: kind.limit, weight: kind.weight, key_count }
    }
}

/// One backend's telemetry: its sink (with the interest it declared), its
/// name and driver, its thresholds. Every driver reports through it.
pub(crate) struct Reporter {
    telemetry: Option<Telemetry>,
    interest: Interest,
    backend: Box<str>,
    driver: &'static str,
    thresholds: Thresholds,
    meter: Meter,
}

/// An acquire in progress, from its call to [`Reporter::granted`] or
/// [`Reporter::failed`].
pub(crate) struct Acquiring {
    shape: Shape,
    /// When the call began; read only when someone measures every acquire
    /// (or, from [`Acquiring::queued`], once it waits).
    started: Option<Instant>,
    /// The acquire waited (the threshold events only count those).
    queued: bool,
    span: AcquireSpan,
    meter: AcquireMeter,
}

impl Acquiring {
    /// The acquire is about to wait: when it began, for its deadline and
    /// the threshold events (read now unless it already was).
    pub fn queued(&mut self) -> Instant {
        self.queued = true;
        *self.started.get_or_insert_with(Instant::now)
    }

    /// Leaves `took` out of the acquire's measured time: the read of a
    /// failed wait's holders, after the wait ended (review R60): the store
    /// drivers read them.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres", feature = "mysql")), allow(dead_code))]
    pub fn leave_out(&mut self, took: Duration) {
        if let Some(started) = &mut self.started {
            *started += took;
        }
    }
}

/// A granted lease's hold, until [`Reporter::released`] or
/// [`Reporter::hold_ended`].
pub(crate) struct Hold {
    /// When it was granted; read only when someone measures holds.
    since: Option<Instant>,
    fence: u64,
    /// Reported already: a hold ends once, however many ways it ends.
    ended: AtomicBool,
    span: HoldSpan,
    meter: HoldMeter,
}

impl Reporter {
    pub fn new(telemetry: Option<Telemetry>, backend: &str, driver: &'static str, thresholds: Thresholds) -> Reporter {
        let interest = telemetry.as_ref().map_or(Interest::NONE, |sink| sink.interest());
        Reporter { telemetry, interest, backend: backend.into(), driver, thresholds, meter: Meter::new(backend, driver) }
    }

    /// The backend's name.
    pub fn backend(&self) -> &str {
        &self.backend
    }

    /// An acquire called now asking for `shape`.
    #[inline(always)]
    pub fn acquiring(&self, shape: Shape) -> Acquiring {
        let span = AcquireSpan::start(&self.backend, self.driver, &shape);
        let meter = self.meter.acquiring();
        let started = (self.interest.acquires || span.is_recording() || meter.is_recording()).then(Instant::now);
        Acquiring { shape, started, queued: false, span, meter }
    }

    /// Nothing to report: no sink, no span recording this acquire and no
    /// metrics (the hot path of a backend without telemetry stops here).
    #[inline(always)]
    fn unheard(&self, acquiring: &Acquiring) -> bool {
        self.telemetry.is_none() && !acquiring.span.is_recording() && !acquiring.meter.is_recording()
    }

    /// Reports an acquire granted with `fence` and begins its hold.
    #[inline(always)]
    pub fn granted(&self, acquiring: Acquiring, fence: u64) -> Hold {
        if self.unheard(&acquiring) {
            return Hold { since: None, fence, ended: AtomicBool::new(false), span: HoldSpan::none(), meter: HoldMeter::none() };
        }
        self.granted_heard(acquiring, fence)
    }

    fn granted_heard(&self, acquiring: Acquiring, fence: u64) -> Hold {
        let (now, span, meter) = self.acquired(acquiring, Ok(fence));
        let slow_holds = self.telemetry.is_some() && self.thresholds.slow_hold_ms.is_some();
        let since =
            (slow_holds || self.interest.holds || span.is_recording() || meter.is_recording()).then(|| now.unwrap_or_else(Instant::now));
        Hold { since, fence, ended: AtomicBool::new(false), span, meter }
    }

    /// Reports an acquire that failed with `error`.
    #[inline(always)]
    pub fn failed(&self, acquiring: Acquiring, error: &LockError) {
        if !self.unheard(&acquiring) {
            self.acquired(acquiring, Err(error));
        }
    }

    /// Reports a finished acquire: a wait timeout and a slow acquire
    /// (whatever its outcome) of one that waited, the trace event, the span
    /// and the metrics. Answers when it ended, if the clock was read, and
    /// the span and meter of a grant's hold.
    fn acquired(&self, acquiring: Acquiring, outcome: Result<u64, &LockError>) -> (Option<Instant>, HoldSpan, HoldMeter) {
        let Acquiring { shape, started, queued, span, meter } = acquiring;
        let thresholds = queued && self.telemetry.is_some();
        let measured = started.filter(|_| thresholds || self.interest.acquires || span.is_recording() || meter.is_recording());
        let code = outcome.map_err(LockError::code);
        let Some(started) = measured else {
            return (None, span.finish(&self.backend, self.driver, Duration::ZERO, code), meter.finish(Duration::ZERO, code));
        };
        let now = Instant::now();
        let waited = now.saturating_duration_since(started);
        let error = code.err();
        if let (true, Some(telemetry)) = (thresholds, &self.telemetry) {
            let details = || outcome.err().filter(|err| tells_holders(err.code())).and_then(LockError::details).cloned();
            if error == Some(ErrorCode::WaitTimeout) {
                telemetry.event(&TelemetryEvent::WaitTimeout { backend: self.backend.to_string(), waited, details: details() });
            }
            if let Some(threshold) = self.thresholds.slow_acquire_ms.map(|ms| Duration::from_millis(ms.into())) {
                if waited >= threshold {
                    let backend = self.backend.to_string();
                    telemetry.event(&TelemetryEvent::SlowAcquire { backend, waited, threshold, outcome: error, details: details() });
                }
            }
        }
        if let (true, Some(telemetry)) = (self.interest.acquires, &self.telemetry) {
            telemetry.trace(&TraceEvent::Acquire {
                backend: &self.backend,
                driver: self.driver,
                mode: shape.mode,
                limit: shape.limit,
                weight: shape.weight,
                key_count: shape.key_count,
                waited,
                outcome: error,
                fence: code.ok(),
            });
        }
        (Some(now), span.finish(&self.backend, self.driver, waited, code), meter.finish(waited, code))
    }

    /// A lease's own release ended its hold (`outcome` `None`: released):
    /// reports a slow hold, then the hold. Nothing to do for a hold nobody
    /// measured.
    #[inline(always)]
    pub fn released(&self, hold: &Hold, outcome: Option<ErrorCode>) {
        if hold.since.is_some() {
            self.released_measured(hold, outcome);
        }
    }

    fn released_measured(&self, hold: &Hold, outcome: Option<ErrorCode>) {
        if let (Some(since), Some(telemetry), Some(ms)) = (hold.since, &self.telemetry, self.thresholds.slow_hold_ms) {
            let (held, threshold) = (since.elapsed(), Duration::from_millis(ms.into()));
            if held >= threshold {
                telemetry.event(&TelemetryEvent::SlowHold { backend: self.backend.to_string(), held, threshold });
            }
        }
        self.hold_ended(hold, outcome);
    }

    /// Reports the end of a hold (the first one only): released (`None`)
    /// or lost.
    #[inline]
    pub fn hold_ended(&self, hold: &Hold, outcome: Option<ErrorCode>) {
        let Some(since) = hold.since else { return };
        if hold.ended.swap(true, Ordering::AcqRel) {
            return;
        }
        let held = since.elapsed();
        if let (true, Some(telemetry)) = (self.interest.holds, &self.telemetry) {
            telemetry.trace(&TraceEvent::Hold { backend: &self.backend, driver: self.driver, fence: hold.fence, held, outcome });
        }
        hold.span.finish(held, outcome);
        hold.meter.finish(held, outcome);
    }

    /// Reports a lease found lost (`LEASE_LOST` or `OUTCOME_UNKNOWN`): of
    /// the drivers whose leases can be (file, the store drivers).
    #[cfg(any(feature = "file", feature = "redis", feature = "postgres", feature = "mysql"))]
    pub fn lost(&self, code: ErrorCode) {
        if let Some(telemetry) = &self.telemetry {
            telemetry.event(&TelemetryEvent::LeaseLost { backend: self.backend.to_string(), code });
        }
    }

    /// Reports a forced release of one key that removed `removed` holders
    /// and raised its fence counter to `fence` (`None`: the local driver).
    pub fn forced_release(&self, removed: u32, fence: Option<u64>) {
        if let Some(telemetry) = &self.telemetry {
            telemetry.event(&TelemetryEvent::ForcedRelease { backend: self.backend.to_string(), removed, fence });
        }
    }
}
