//! Spans of the `tracing` crate, with the cargo feature `tracing` (off by
//! default): a `dokebi-lock acquire` span per acquire call and a
//! `dokebi-lock hold` span per granted lease, from the grant to its release
//! or loss. Both are children of the span current where the acquire was
//! called, so a request's trace shows why it waited; their fields are
//! counts, codes and durations (those of [`crate::telemetry::TraceEvent`]),
//! never keys. They are at level INFO, target `dokebi_lock::trace`; a hold
//! span is recorded when its acquire span is. A Rust acquire future dropped
//! before its outcome closes its span without one.
//!
//! Without the feature, every type here is empty and every function does
//! nothing, so the drivers pay nothing for it. The only callers are in
//! [`crate::telemetry::Reporter`].

#[cfg(feature = "tracing")]
pub(crate) use spans::{AcquireSpan, HoldSpan};

#[cfg(not(feature = "tracing"))]
pub(crate) use without::{AcquireSpan, HoldSpan};

#[cfg(feature = "tracing")]
mod spans {
    use std::sync::Mutex;
    use std::time::Duration;

    use tracing::field::Empty;
    use tracing::{Dispatch, Span};

    use crate::error::ErrorCode;
    use crate::telemetry::Shape;

    /// The span of one acquire in progress.
    pub(crate) struct AcquireSpan {
        span: Span,
        /// The span current at the call and the subscriber of the calling
        /// thread, for the hold span: a redis acquire ends on the driver's
        /// thread, where neither is current. `None` while nobody records.
        caller: Option<(Span, Dispatch)>,
    }

    impl AcquireSpan {
        pub fn start(backend: &str, driver: &'static str, shape: &Shape) -> AcquireSpan {
            let span = tracing::info_span!(
                "dokebi-lock acquire",
                backend,
                driver,
                mode = shape.mode.as_str(),
                limit = shape.limit,
                weight = shape.weight,
                key_count = shape.key_count,
                wait_ms = Empty,
                outcome = Empty,
                fence = Empty,
                otel.status_code = Empty,
            );
            let caller = (!span.is_disabled()).then(|| (Span::current(), tracing::dispatcher::get_default(Dispatch::clone)));
            AcquireSpan { span, caller }
        }

        pub fn is_recording(&self) -> bool {
            self.caller.is_some()
        }

        /// Records the outcome (a fence when granted, else the error's
        /// code), closes the span, and opens the hold span of a grant.
        pub fn finish(self, backend: &str, driver: &'static str, waited: Duration, outcome: Result<u64, ErrorCode>) -> HoldSpan {
            let AcquireSpan { span, caller } = self;
            let Some((caller, dispatch)) = caller else { return HoldSpan::none() };
            span.record("wait_ms", millis(waited));
            match outcome {
                Ok(fence) => {
                    span.record("outcome", "granted");
                    span.record("fence", fence);
                }
                Err(code) => {
                    span.record("outcome", code.as_str());
                    span.record("otel.status_code", "ERROR");
                }
            }
            drop(span);
            let Ok(fence) = outcome else { return HoldSpan::none() };
            let hold = tracing::dispatcher::with_default(&dispatch, || {
                tracing::info_span!(
                    parent: &caller,
                    "dokebi-lock hold",
                    backend,
                    driver,
                    fence,
                    held_ms = Empty,
                    outcome = Empty,
                    otel.status_code = Empty,
                )
            });
            HoldSpan(Mutex::new(Some(hold)))
        }
    }

    /// The span of one hold, open until the hold ends.
    pub(crate) struct HoldSpan(Mutex<Option<Span>>);

    impl HoldSpan {
        pub fn none() -> HoldSpan {
            HoldSpan(Mutex::new(None))
        }

        pub fn is_recording(&self) -> bool {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).as_ref().is_some_and(|span| !span.is_disabled())
        }

        /// Records how the hold ended (`None`: released) and closes the span.
        pub fn finish(&self, held: Duration, outcome: Option<ErrorCode>) {
            let Some(span) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
            span.record("held_ms", millis(held));
            match outcome {
                None => span.record("outcome", "released"),
                Some(code) => span.record("outcome", code.as_str()).record("otel.status_code", "ERROR"),
            };
        }
    }

    fn millis(duration: Duration) -> u64 {
        u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
    }
}

#[cfg(not(feature = "tracing"))]
mod without {
    use std::time::Duration;

    use crate::error::ErrorCode;
    use crate::telemetry::Shape;

    /// Nothing: the feature `tracing` is off.
    pub(crate) struct AcquireSpan;

    impl AcquireSpan {
        #[inline(always)]
        pub fn start(_backend: &str, _driver: &'static str, _shape: &Shape) -> AcquireSpan {
            AcquireSpan
        }

        #[inline(always)]
        pub fn is_recording(&self) -> bool {
            false
        }

        #[inline(always)]
        pub fn finish(self, _backend: &str, _driver: &'static str, _waited: Duration, _outcome: Result<u64, ErrorCode>) -> HoldSpan {
            HoldSpan
        }
    }

    /// Nothing: the feature `tracing` is off.
    pub(crate) struct HoldSpan;

    impl HoldSpan {
        #[inline(always)]
        pub fn none() -> HoldSpan {
            HoldSpan
        }

        #[inline(always)]
        pub fn is_recording(&self) -> bool {
            false
        }

        #[inline(always)]
        pub fn finish(&self, _held: Duration, _outcome: Option<ErrorCode>) {}
    }
}
