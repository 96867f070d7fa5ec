//! Metrics of the `metrics` crate, with the cargo feature `metrics` (off by
//! default): the instruments of the Node package's `@dokebi/lock/otel`,
//! under its names and attribute keys so one dashboard reads both, handed
//! to whatever recorder the host installed (a Prometheus or OpenTelemetry
//! exporter). Acquires and holds are measured per backend and driver,
//! connections, forced releases and policies from the telemetry events and
//! a policy's refusals; labels are names of backends, members and connections and
//! error codes, never keys. Each call looks its metric up by its labels, so
//! a recorder installed after the provider opened gets the values from then
//! on (the units and descriptions are told once, see `describe`).
//!
//! Without the feature, every type here is empty and every function does
//! nothing, so the drivers pay nothing for it. The only callers are in
//! [`crate::telemetry`].

#[cfg(feature = "metrics")]
pub(crate) use recorded::{event, policy_refused, AcquireMeter, HoldMeter, Meter, RECORDING};

#[cfg(not(feature = "metrics"))]
pub(crate) use without::{event, policy_refused, AcquireMeter, HoldMeter, Meter, RECORDING};

#[cfg(feature = "metrics")]
mod recorded {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Once};
    use std::time::Duration;

    use metrics::{counter, gauge, histogram, Label, SharedString, Unit};

    use crate::error::ErrorCode;
    use crate::telemetry::TelemetryEvent;

    /// Every acquire and hold is measured.
    pub(crate) const RECORDING: bool = true;

    const ACQUIRE_DURATION: &str = "dokebi_lock.acquire.duration";
    const HOLD_DURATION: &str = "dokebi_lock.hold.duration";
    const ACQUIRE_TIMEOUTS: &str = "dokebi_lock.acquire.timeouts";
    const LEASE_LOSSES: &str = "dokebi_lock.lease.losses";
    const WAITING: &str = "dokebi_lock.waiting";
    const HELD: &str = "dokebi_lock.held";
    const STORE_UP: &str = "dokebi_lock.store.up";
    const CLOCK_BEHIND: &str = "dokebi_lock.clock_behind";
    const FORCED_RELEASES: &str = "dokebi_lock.forced_releases";
    const POLICY_FALLBACKS: &str = "dokebi_lock.policy.fallbacks";
    const POLICY_SKIPPED: &str = "dokebi_lock.policy.skipped";
    const POLICY_REFUSALS: &str = "dokebi_lock.policy.refusals";

    const BACKEND: &str = "dokebi_lock.backend";
    const DRIVER: &str = "dokebi_lock.driver";
    const MEMBER: &str = "dokebi_lock.member";
    const PREFERRED: &str = "dokebi_lock.preferred";
    const CONNECTION: &str = "dokebi_lock.connection";
    const ERROR_TYPE: &str = "error.type";

    static DESCRIBED: Once = Once::new();

    /// Units and descriptions, told the recorder once: by the first
    /// backend built after it was installed, or never if none was.
    fn describe() {
        metrics::describe_histogram!(ACQUIRE_DURATION, Unit::Seconds, "Time an acquire took, from the call to the grant or failure");
        metrics::describe_histogram!(HOLD_DURATION, Unit::Seconds, "Time a lease was held, from the grant to the release or loss");
        metrics::describe_counter!(ACQUIRE_TIMEOUTS, Unit::Count, "Acquires that gave up waiting (WAIT_TIMEOUT)");
        metrics::describe_counter!(LEASE_LOSSES, Unit::Count, "Leases lost while held (LEASE_LOST)");
        metrics::describe_gauge!(WAITING, Unit::Count, "Acquires in progress");
        metrics::describe_gauge!(HELD, Unit::Count, "Leases held");
        metrics::describe_gauge!(STORE_UP, "1 while the store connection answers, else 0");
        metrics::describe_counter!(CLOCK_BEHIND, Unit::Count, "Grants that showed a Redis server clock at least 1 s behind");
        metrics::describe_counter!(FORCED_RELEASES, Unit::Count, "Keys force-released (forceRelease), whether or not they had holders");
        metrics::describe_counter!(
            POLICY_FALLBACKS,
            Unit::Count,
            "A policy's acquires served by a member other than the rule's preferred one"
        );
        metrics::describe_gauge!(POLICY_SKIPPED, "1 while a policy's member is passed over as unavailable, else 0");
        metrics::describe_counter!(
            POLICY_REFUSALS,
            Unit::Count,
            "A policy's acquires refused NO_ELIGIBLE_BACKEND, by the member the rule prefers"
        );
    }

    /// One backend's labels: its name and driver. Behind one pointer, as a
    /// hold keeps them in its lease; the name is shared, so labelling a
    /// measurement copies no string.
    #[derive(Clone)]
    pub(crate) struct Meter(Arc<[Label; 2]>);

    impl Meter {
        pub fn new(backend: &str, driver: &'static str) -> Meter {
            DESCRIBED.call_once(describe);
            Meter(Arc::new([Label::new(BACKEND, SharedString::from(Arc::<str>::from(backend))), Label::new(DRIVER, driver)]))
        }

        fn labels(&self) -> Vec<Label> {
            self.0.to_vec()
        }

        /// An acquire called now: waiting until its meter finishes or is
        /// dropped (a Rust acquire future dropped before its outcome).
        pub fn acquiring(&self) -> AcquireMeter {
            gauge!(WAITING, self.labels()).increment(1.0);
            AcquireMeter(self.clone())
        }
    }

    /// One acquire in progress, counted as waiting while it lives.
    pub(crate) struct AcquireMeter(Meter);

    impl AcquireMeter {
        pub fn is_recording(&self) -> bool {
            true
        }

        /// Records how long the acquire took and how it ended (a fence
        /// when granted, else the error's code); a grant's hold begins.
        pub fn finish(self, waited: Duration, outcome: Result<u64, ErrorCode>) -> HoldMeter {
            let mut labels = self.0.labels();
            if let Err(code) = outcome {
                if code == ErrorCode::WaitTimeout {
                    counter!(ACQUIRE_TIMEOUTS, labels.clone()).increment(1);
                }
                labels.push(Label::new(ERROR_TYPE, code.as_str()));
            }
            histogram!(ACQUIRE_DURATION, labels).record(waited.as_secs_f64());
            match outcome {
                Ok(_) => HoldMeter::granted(&self.0),
                Err(_) => HoldMeter::none(),
            }
        }
    }

    impl Drop for AcquireMeter {
        fn drop(&mut self) {
            gauge!(WAITING, self.0.labels()).decrement(1.0);
        }
    }

    /// One hold, counted as held until it ends.
    pub(crate) struct HoldMeter {
        meter: Option<Meter>,
        /// Still counted in the held gauge.
        held: AtomicBool,
    }

    impl HoldMeter {
        pub fn none() -> HoldMeter {
            HoldMeter { meter: None, held: AtomicBool::new(false) }
        }

        fn granted(meter: &Meter) -> HoldMeter {
            gauge!(HELD, meter.labels()).increment(1.0);
            HoldMeter { meter: Some(meter.clone()), held: AtomicBool::new(true) }
        }

        pub fn is_recording(&self) -> bool {
            self.meter.is_some()
        }

        /// Records how long the lease was held and how the hold ended
        /// (`None`: released); it is no longer held.
        pub fn finish(&self, held: Duration, outcome: Option<ErrorCode>) {
            let Some(meter) = &self.meter else { return };
            if !self.held.swap(false, Ordering::AcqRel) {
                return;
            }
            let mut labels = meter.labels();
            gauge!(HELD, labels.clone()).decrement(1.0);
            if let Some(code) = outcome {
                if code == ErrorCode::LeaseLost {
                    counter!(LEASE_LOSSES, labels.clone()).increment(1);
                }
                labels.push(Label::new(ERROR_TYPE, code.as_str()));
            }
            histogram!(HOLD_DURATION, labels).record(held.as_secs_f64());
        }
    }

    impl Drop for HoldMeter {
        /// A hold dropped without its end reported is not held any more
        /// either: whichever way a lease goes away, the gauge never drifts
        /// up.
        fn drop(&mut self) {
            if let (Some(meter), true) = (&self.meter, *self.held.get_mut()) {
                gauge!(HELD, meter.labels()).decrement(1.0);
            }
        }
    }

    /// Records what a telemetry event measures: a connection up or down, a
    /// server clock behind, a forced release, a policy's fallback, a member
    /// skipped or back.
    pub(crate) fn event(event: &TelemetryEvent) {
        let name = |name: &String| SharedString::from(name.clone());
        match event {
            TelemetryEvent::Connection { connection, up } => {
                gauge!(STORE_UP, CONNECTION => name(connection)).set(if *up { 1.0 } else { 0.0 });
            }
            TelemetryEvent::ClockBehind { backend, connection, .. } => {
                counter!(CLOCK_BEHIND, BACKEND => name(backend), CONNECTION => name(connection)).increment(1);
            }
            TelemetryEvent::ForcedRelease { backend, .. } => {
                counter!(FORCED_RELEASES, BACKEND => name(backend)).increment(1);
            }
            TelemetryEvent::PolicyFallback { backend, preferred, served, .. } => {
                counter!(POLICY_FALLBACKS, BACKEND => name(backend), MEMBER => name(served), PREFERRED => name(preferred)).increment(1);
            }
            TelemetryEvent::PolicySkipped { backend, member, .. } => {
                gauge!(POLICY_SKIPPED, BACKEND => name(backend), MEMBER => name(member)).set(1.0);
            }
            TelemetryEvent::PolicyBack { backend, member, .. } => {
                gauge!(POLICY_SKIPPED, BACKEND => name(backend), MEMBER => name(member)).set(0.0);
            }
            // Measured from every acquire's and hold's outcome (the meters
            // above), not only from those a threshold reports.
            TelemetryEvent::SlowAcquire { .. }
            | TelemetryEvent::SlowHold { .. }
            | TelemetryEvent::WaitTimeout { .. }
            | TelemetryEvent::LeaseLost { .. } => {}
        }
    }

    /// A policy `backend` refused an acquire (`NO_ELIGIBLE_BACKEND`) whose
    /// rule prefers `member`.
    pub(crate) fn policy_refused(backend: &str, member: &str) {
        counter!(POLICY_REFUSALS, BACKEND => backend.to_owned(), MEMBER => member.to_owned()).increment(1);
    }
}

#[cfg(not(feature = "metrics"))]
mod without {
    use std::time::Duration;

    use crate::error::ErrorCode;
    use crate::telemetry::TelemetryEvent;

    /// Nothing is measured: the feature `metrics` is off.
    pub(crate) const RECORDING: bool = false;

    /// Nothing: the feature `metrics` is off.
    pub(crate) struct Meter;

    impl Meter {
        #[inline(always)]
        pub fn new(_backend: &str, _driver: &'static str) -> Meter {
            Meter
        }

        #[inline(always)]
        pub fn acquiring(&self) -> AcquireMeter {
            AcquireMeter
        }
    }

    /// Nothing: the feature `metrics` is off.
    pub(crate) struct AcquireMeter;

    impl AcquireMeter {
        #[inline(always)]
        pub fn is_recording(&self) -> bool {
            false
        }

        #[inline(always)]
        pub fn finish(self, _waited: Duration, _outcome: Result<u64, ErrorCode>) -> HoldMeter {
            HoldMeter
        }
    }

    /// Nothing: the feature `metrics` is off.
    pub(crate) struct HoldMeter;

    impl HoldMeter {
        #[inline(always)]
        pub fn none() -> HoldMeter {
            HoldMeter
        }

        #[inline(always)]
        pub fn is_recording(&self) -> bool {
            false
        }

        #[inline(always)]
        pub fn finish(&self, _held: Duration, _outcome: Option<ErrorCode>) {}
    }

    #[inline(always)]
    pub(crate) fn event(_event: &TelemetryEvent) {}

    #[inline(always)]
    pub(crate) fn policy_refused(_backend: &str, _member: &str) {}
}
