//! What `status()` reports of a pooled SQL connection (postgres, mysql),
//! kept as its statements answer or fail. A Redis connection keeps its own:
//! it counts itself connected by its open links, not by its last answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use super::{Connectivity, Failure};
use crate::error::ErrorCode;
use crate::telemetry::{Telemetry, TelemetryEvent};

/// The last answer and failure of one connection, whether the server
/// answers, and whether releases in other processes reach this one.
pub(crate) struct Health {
    /// `<name>` of the connection option, as telemetry's `connection`
    /// events name it.
    name: String,
    telemetry: Option<Telemetry>,
    last: Mutex<Last>,
    connected: AtomicBool,
    listening: AtomicBool,
}

#[derive(Default)]
struct Last {
    answer: Option<SystemTime>,
    error: Option<ErrorCode>,
}

impl Health {
    /// Not connected until a statement answers, not listening until the
    /// driver's wake-ups say so.
    pub fn new(name: &str, telemetry: Option<Telemetry>) -> Health {
        Health {
            name: name.to_owned(),
            telemetry,
            last: Mutex::default(),
            connected: AtomicBool::new(false),
            listening: AtomicBool::new(false),
        }
    }

    fn last(&self) -> std::sync::MutexGuard<'_, Last> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The server answered a statement.
    pub fn answered(&self) {
        self.set_connected(true);
        self.last().answer = Some(SystemTime::now());
    }

    /// A statement (or its connect) failed: no answer or no server counts
    /// the connection down.
    pub fn failed(&self, failure: &Failure) {
        let code = match failure {
            Failure::Unknown(_) => ErrorCode::OutcomeUnknown,
            _ => ErrorCode::ProviderFailed,
        };
        if matches!(failure, Failure::Unknown(_) | Failure::Unreachable(_) | Failure::Unanswered(_)) {
            self.set_connected(false);
        }
        self.last().error = Some(code);
    }

    /// Records whether the server answers, telling telemetry when that
    /// changes (a `connection` event, as a Redis connection's).
    pub fn set_connected(&self, up: bool) {
        if self.connected.swap(up, Ordering::Relaxed) != up {
            if let Some(telemetry) = &self.telemetry {
                telemetry.event(&TelemetryEvent::Connection { connection: self.name.clone(), up });
            }
        }
    }

    /// True while releases in other processes reach this one (a `LISTEN`
    /// connection, a release poller).
    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Acquire)
    }

    pub fn set_listening(&self, listening: bool) {
        self.listening.store(listening, Ordering::Release);
    }

    /// What `status()` reports.
    pub fn connectivity(&self) -> Connectivity {
        let last = self.last();
        Connectivity {
            last_answer: last.answer,
            connected: self.connected.load(Ordering::Relaxed),
            subscribed: self.is_listening(),
            last_error: last.error,
        }
    }
}
