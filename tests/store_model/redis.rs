//! The model on a private `redis-server` with `appendonly yes` and
//! `appendfsync always`: its faults are `DEBUG LOADAOF` (the data set
//! thrown away and loaded back from the AOF, as a restart does),
//! `DEBUG RELOAD` (saved to an RDB and loaded back) and `DEBUG SLEEP`
//! (the server stalls: every command, a grant's commit too, is slow).
//! Every name must carry an expiry at all times, and none may be left once
//! the retention passed.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::redis_server::RedisServer;

use super::history::{Location, Recorder};
use super::model::{residue, Difference, Spec, Store, Trigger, RETENTION_MS};
use super::rng::Rng;

pub struct RedisModel {
    server: RedisServer,
    last_load: Mutex<Option<Instant>>,
}

const LOADAOF: &str = "DEBUG LOADAOF";
const RELOAD: &str = "DEBUG RELOAD";
const SLEEP: &str = "DEBUG SLEEP";

impl RedisModel {
    pub fn start() -> RedisModel {
        let server = RedisServer::start_persistent(&["--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"]);
        RedisModel { server, last_load: Mutex::new(None) }
    }

    fn debug(&self, args: &[&str]) -> bool {
        let mut command = redis::cmd("DEBUG");
        for arg in args {
            command.arg(*arg);
        }
        command.query::<redis::Value>(&mut self.server.client()).is_ok()
    }

    /// `DEBUG LOADAOF`, unless the last one was under 2.5 s ago and that is
    /// known to repeat fences (see `KNOWN_OPEN`: a restored reservation's
    /// second and the next one); where it is not, now and then one or two
    /// more a moment after.
    fn load_aof(&self, rng: &mut Rng) -> bool {
        let mut last = self.last_load.lock().unwrap();
        let soon = last.is_some_and(|at| at.elapsed() < Duration::from_millis(2500));
        if soon && !Trigger::LoadAofWithinTwoSeconds.enabled() {
            return false;
        }
        let mut loaded = self.debug(&["LOADAOF"]);
        if Trigger::LoadAofWithinTwoSeconds.enabled() && rng.chance(50) {
            for _ in 0..rng.between(1, 2) {
                std::thread::sleep(Duration::from_millis(rng.between(100, 700)));
                loaded &= self.debug(&["LOADAOF"]);
            }
        }
        *last = Some(Instant::now());
        loaded
    }
}

impl Store for RedisModel {
    fn name(&self) -> &'static str {
        "redis"
    }

    fn differences(&self) -> &'static [Difference] {
        &[Difference::Namespace, Difference::LeaseMs]
    }

    fn yaml(&self, a: &Spec, b: &Spec) -> String {
        let backend = |name: &str, spec: &Spec| {
            format!(
                "      {name}:\n        driver: redis\n        connection: main\n        namespace: {}\n        leaseMs: {}\n        fenceRetentionMs: {RETENTION_MS}\n",
                spec.namespace, spec.lease_ms
            )
        };
        format!(
            "schemaVersion: 1\noptions:\n  dokebi-redis:\n    connections:\n      main:\n        url: {}\n        commandTimeoutMs: 800\n  dokebi-lock:\n    backends:\n{}{}",
            self.server.url(),
            backend("a", a),
            backend("b", b)
        )
    }

    fn location(&self, spec: &Spec) -> Location {
        format!("namespace {}", spec.namespace)
    }

    fn inject(&self, rng: &mut Rng, recorder: &Recorder) -> &'static str {
        match rng.below(10) {
            0..=2 if self.load_aof(rng) => LOADAOF,
            3..=4 if self.debug(&["RELOAD"]) => RELOAD,
            5..=6 if self.debug(&["SLEEP", &format!("0.{:02}", rng.between(5, 40))]) => SLEEP,
            _ => {
                self.residue(recorder, false);
                "expiry check"
            }
        }
    }

    fn faults(&self) -> Vec<&'static str> {
        vec![LOADAOF, RELOAD, SLEEP, "expiry check"]
    }

    fn residue(&self, recorder: &Recorder, after_retention: bool) {
        let mut client = self.server.client();
        for name in self.server.keys() {
            let ttl: i64 = redis::cmd("PTTL").arg(&name).query(&mut client).unwrap();
            // -2: gone since KEYS listed it.
            if ttl == -1 || (after_retention && ttl != -2) {
                residue(recorder, format!("redis name {name:?}"), (ttl != -1).then_some(ttl), after_retention);
            }
        }
    }
}
