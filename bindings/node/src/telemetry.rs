//! Forwards the core's telemetry (redis backends) to the JS layer, which
//! publishes it on `node:diagnostics_channel`.

use std::sync::Arc;
use std::time::Duration;

use dokebi_lock::telemetry::{Telemetry, TelemetryEvent};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::Status;
use napi_derive::napi;

/// One telemetry event as the JS layer receives it: `name` is the channel
/// suffix (`slow-acquire`, ...), the other fields are those of the event.
/// Never a key.
#[napi(object)]
pub struct TelemetryEntry {
    pub name: String,
    pub backend: Option<String>,
    pub connection: Option<String>,
    /// The error code: the outcome of a slow acquire that failed, the code
    /// of a lost lease, `WAIT_TIMEOUT` for a wait timeout.
    pub code: Option<String>,
    pub waited_ms: Option<f64>,
    pub held_ms: Option<f64>,
    pub threshold_ms: Option<f64>,
    pub up: Option<bool>,
    /// A clock-behind event: how far the server's clock is at least behind.
    pub behind_ms: Option<f64>,
    /// A clock-behind event: the backend's `fenceRetentionMs`.
    pub fence_retention_ms: Option<f64>,
    /// A policy event: the member backend (skipped, back) or the member
    /// that served (fallback).
    pub member: Option<String>,
    /// A policy-fallback event: the rule's preferred member, which could not serve.
    pub preferred: Option<String>,
    /// A policy-skipped event: why the member could not serve (never a key).
    pub reason: Option<String>,
    /// A policy-back event: how long the member was skipped.
    pub skipped_ms: Option<f64>,
    /// A forced-release event: the live holders it removed.
    pub removed: Option<u32>,
    /// A forced-release event: the key's fence counter as raised (a decimal
    /// string, as every fence in JS).
    pub fence: Option<String>,
    /// A wait-timeout or slow-acquire event of a `WAIT_TIMEOUT` or
    /// `LOCK_BUSY`: the error's details as JSON text (the holders of the key
    /// that kept the acquire out), which the JS layer parses.
    pub details: Option<String>,
}

/// Calls the JS telemetry sink; weak, so it never keeps Node alive.
pub type TelemetryForwarder = ThreadsafeFunction<TelemetryEntry, (), TelemetryEntry, Status, false, true>;

/// The core's telemetry sink that hands every event to `forward`.
pub fn sink(forward: TelemetryForwarder) -> Telemetry {
    Arc::new(move |event: &TelemetryEvent| {
        forward.call(entry(event), ThreadsafeFunctionCallMode::NonBlocking);
    })
}

fn entry(event: &TelemetryEvent) -> TelemetryEntry {
    let ms = |d: &Duration| Some(d.as_secs_f64() * 1000.0);
    let mut entry = TelemetryEntry {
        name: event.name().to_owned(),
        backend: None,
        connection: None,
        code: None,
        waited_ms: None,
        held_ms: None,
        threshold_ms: None,
        up: None,
        behind_ms: None,
        fence_retention_ms: None,
        member: None,
        preferred: None,
        reason: None,
        skipped_ms: None,
        removed: None,
        fence: None,
        details: None,
    };
    match event {
        TelemetryEvent::SlowAcquire { backend, waited, threshold, outcome, details } => {
            entry.backend = Some(backend.clone());
            entry.waited_ms = ms(waited);
            entry.threshold_ms = ms(threshold);
            entry.code = outcome.map(|code| code.as_str().to_owned());
            entry.details = details.as_ref().map(ToString::to_string);
        }
        TelemetryEvent::SlowHold { backend, held, threshold } => {
            entry.backend = Some(backend.clone());
            entry.held_ms = ms(held);
            entry.threshold_ms = ms(threshold);
        }
        TelemetryEvent::WaitTimeout { backend, waited, details } => {
            entry.backend = Some(backend.clone());
            entry.waited_ms = ms(waited);
            entry.code = Some(dokebi_lock::ErrorCode::WaitTimeout.as_str().to_owned());
            entry.details = details.as_ref().map(ToString::to_string);
        }
        TelemetryEvent::LeaseLost { backend, code } => {
            entry.backend = Some(backend.clone());
            entry.code = Some(code.as_str().to_owned());
        }
        TelemetryEvent::Connection { connection, up } => {
            entry.connection = Some(connection.clone());
            entry.up = Some(*up);
        }
        TelemetryEvent::ClockBehind { backend, connection, behind, fence_retention } => {
            entry.backend = Some(backend.clone());
            entry.connection = Some(connection.clone());
            entry.behind_ms = ms(behind);
            entry.fence_retention_ms = ms(fence_retention);
        }
        TelemetryEvent::ForcedRelease { backend, removed, fence } => {
            entry.backend = Some(backend.clone());
            entry.removed = Some(*removed);
            entry.fence = fence.map(|fence| fence.to_string());
        }
        TelemetryEvent::PolicyFallback { backend, preferred, served, code } => {
            entry.backend = Some(backend.clone());
            entry.member = Some(served.clone());
            entry.preferred = Some(preferred.clone());
            entry.code = Some(code.as_str().to_owned());
        }
        TelemetryEvent::PolicySkipped { backend, member, code, reason } => {
            entry.backend = Some(backend.clone());
            entry.member = Some(member.clone());
            entry.code = Some(code.as_str().to_owned());
            entry.reason = Some(reason.clone());
        }
        TelemetryEvent::PolicyBack { backend, member, skipped } => {
            entry.backend = Some(backend.clone());
            entry.member = Some(member.clone());
            entry.skipped_ms = ms(skipped);
        }
    }
    entry
}
