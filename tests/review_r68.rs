//! Review R68 of commit 9cb36dc (postgres functions 14: a grant raises its
//! fences and writes its holder rows in one statement of data-modifying
//! CTEs, a release frees its rows, finds the keys waited for and probes
//! for stale key rows in one, `lock_keys` sorts no single key, settings
//! assigned rather than `PERFORM`ed), which claims behaviour identical to
//! functions 13.
//!
//! The functions are installed from source text: this build's from
//! src/postgres/schema.rs, the previous build's (functions 13) from
//! `git show b336be7:src/postgres/schema.rs`, into schemas of the test's
//! own (`r68_...`), and called directly over tokio-postgres as the driver
//! calls them, so an interleaving can be held open at any point (a
//! transaction left uncommitted) and both versions can run side by side on
//! one set of tables (a process of each build during a rolling upgrade).
//!
//! Run: `cargo test -p dokebi-lock --test review_r68 -- --test-threads=2`

#![allow(dead_code)]

#[path = "postgres/server.rs"]
mod server;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

/// The last commit of functions 13.
const PREVIOUS_BUILD: &str = "b336be7ec279b6d656ce21c3a16fb76184c3545d";
const NS: &str = "r68ns";
const CHANNEL: &str = "r68_channel";
const HOUR: i64 = 3_600_000;

fn url() -> String {
    std::env::var("DOKEBI_PG_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

// ---------------------------------------------------------------------
// Installing a build's SQL.
// ---------------------------------------------------------------------

fn current_source() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/postgres/schema.rs")).unwrap()
}

fn previous_source() -> String {
    let out = std::process::Command::new("git")
        .args(["show", &format!("{PREVIOUS_BUILD}:src/postgres/schema.rs")])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "git show");
    String::from_utf8(out.stdout).unwrap()
}

/// A `const NAME: &str = ...;` of `src`: a raw string or a plain one.
fn constant(src: &str, name: &str) -> String {
    let head = format!("const {name}: &str = ");
    let start = src.find(&head).unwrap_or_else(|| panic!("no {name}")) + head.len();
    let rest = &src[start..];
    if let Some(raw) = rest.strip_prefix("r#\"") {
        raw[..raw.find("\"#;").unwrap()].to_owned()
    } else {
        let plain = &rest[1..];
        plain[..plain.find("\";").unwrap()].to_owned()
    }
}

/// The tables `dokebi_lock*` of `schema` and the functions of `src`, named
/// `<functions>_take` etc. (so two builds' functions can sit on one set
/// of tables).
fn install_sql(src: &str, schema: &str, functions: &str) -> String {
    let t = |suffix: &str| format!("\"{schema}\".\"dokebi_lock{suffix}\"");
    let f = |suffix: &str| format!("\"{schema}\".\"{functions}{suffix}\"");
    let c = |n: &str| constant(src, n);
    let mut sql = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\";\n");
    sql += &c("TABLES")
        .replace("{keys}", &t(""))
        .replace("{holders}", &t("_holders"))
        .replace("{waiting}", &t("_waiting"))
        .replace("{fence_index}", "\"dokebi_lock_fence_until\"");
    sql += &c("FUNCTIONS")
        .replace("{keys}", &t(""))
        .replace("{holders}", &t("_holders"))
        .replace("{waiting}", &t("_waiting"))
        .replace("{take}", &f("_take"))
        .replace("{renew}", &f("_renew"))
        .replace("{held_against}", &f("_held_against"))
        .replace("{give_back}", &f("_give_back"))
        .replace("{withdraw}", &f("_withdraw"))
        .replace("{hand_over}", &f("_hand_over"))
        .replace("{lock_keys}", &f("_lock_keys"))
        .replace("{force_release}", &f("_force_release"))
        .replace("{read_committed}", &c("READ_COMMITTED"))
        .replace("{durable}", &c("DURABLE"))
        .replace("{lock_timeout}", &c("LOCK_TIMEOUT"))
        .replace("{take_arguments}", &c("TAKE_ARGUMENTS"))
        .replace("{dead}", &c("DEAD"));
    sql += &format!("COMMENT ON FUNCTION {}({}) IS '{}';\n", f("_take"), c("TAKE_ARGUMENTS"), c("VERSION"));
    sql
}

/// A schema of the test's own on `url`, dropped at the end.
struct Schema {
    name: String,
    url: String,
}

impl Schema {
    fn fresh(url: &str, tag: &str) -> Schema {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("r68_{tag}_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let schema = Schema { name, url: url.to_owned() };
        schema.batch(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", schema.name));
        schema
    }

    /// Installs this build's functions as `dokebi_lock_*` (14) and, when
    /// `with_previous`, the previous build's as `dokebi_lock13_*`.
    fn install(&self, current: bool, previous: bool) {
        if current {
            let src = current_source();
            assert_eq!(constant(&src, "VERSION"), "dokebi-lock functions 14");
            self.batch(&install_sql(&src, &self.name, "dokebi_lock"));
        }
        if previous {
            let src = previous_source();
            assert_eq!(constant(&src, "VERSION"), "dokebi-lock functions 13");
            self.batch(&install_sql(&src, &self.name, if current { "dokebi_lock13" } else { "dokebi_lock" }));
        }
    }

    fn t(&self, suffix: &str) -> String {
        format!("\"{}\".\"dokebi_lock{suffix}\"", self.name)
    }

    fn batch(&self, sql: &str) {
        let runtime = runtime();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await.unwrap();
            tokio::spawn(connection);
            client.batch_execute(sql).await.unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        });
    }

    fn session(&self, functions: &str) -> Session {
        Session::open(&self.url, &self.name, functions)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        if !thread::panicking() {
            let runtime = runtime();
            let _ = runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&self.url, NoTls).await?;
                tokio::spawn(connection);
                client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name)).await
            });
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

// ---------------------------------------------------------------------
// A session calling the functions.
// ---------------------------------------------------------------------

/// One request's kind: (shared, limit, weight).
#[derive(Clone, Copy, Debug)]
struct Kind(bool, i32, i32);
const EXCLUSIVE: Kind = Kind(false, 1, 1);
const SHARED: Kind = Kind(true, 1, 1);
const COUNTED: Kind = Kind(false, 3, 1);
const COUNTED2: Kind = Kind(false, 3, 2);

/// A session of its own (a multi-threaded runtime, so that the connection
/// is driven, and notifications read, while the test does something else).
struct Session {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    notes: mpsc::Receiver<String>,
    f: String,
    schema: String,
    url: String,
    pid: i32,
}

type PgResult<T> = Result<T, String>;

fn err_text(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

impl Session {
    fn open(url: &str, schema: &str, functions: &str) -> Session {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let (sent, notes) = mpsc::channel();
        let client = runtime.block_on(async {
            let (client, mut connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
            tokio::spawn(async move {
                let mut stream = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
                while let Some(message) = stream.next().await {
                    match message {
                        Ok(AsyncMessage::Notification(n)) => {
                            let _ = sent.send(n.payload().to_owned());
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                }
            });
            client
        });
        let pid: i32 = runtime.block_on(client.query_one("SELECT pg_backend_pid()", &[])).unwrap().get(0);
        Session { runtime, client, notes, f: format!("\"{schema}\".\"{functions}"), schema: schema.to_owned(), url: url.to_owned(), pid }
    }

    fn exec(&self, sql: &str) {
        self.runtime.block_on(self.client.batch_execute(sql)).unwrap_or_else(|e| panic!("{sql}: {}", err_text(e)));
    }

    fn try_exec(&self, sql: &str) -> PgResult<()> {
        self.runtime.block_on(self.client.batch_execute(sql)).map_err(err_text)
    }

    fn listen(&self) {
        self.exec(&format!("LISTEN {CHANNEL}"));
    }

    /// The notifications received so far (after a round trip, so that
    /// those of the calls answered before are in).
    fn notes(&self) -> BTreeSet<String> {
        self.exec("SELECT 1");
        self.notes.try_iter().collect()
    }

    fn fname(&self, suffix: &str) -> String {
        format!("{}{suffix}\"", self.f)
    }

    #[allow(clippy::too_many_arguments)]
    fn take_full(
        &self,
        keys: &[&str],
        token: &str,
        kind: Kind,
        lease_ms: i64,
        waiting_ms: i64,
        ticket: i64,
        retention_ms: i64,
        lock_wait_ms: i64,
    ) -> PgResult<Vec<i64>> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let sql = format!("SELECT {}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)", self.fname("_take"));
        self.runtime
            .block_on(self.client.query_one(
                &sql,
                &[&NS, &keys, &token, &kind.0, &kind.1, &kind.2, &lease_ms, &waiting_ms, &ticket, &retention_ms, &lock_wait_ms],
            ))
            .map(|row| row.get::<_, Vec<i64>>(0))
            .map_err(err_text)
    }

    fn take(&self, keys: &[&str], token: &str, kind: Kind, lease_ms: i64) -> Vec<i64> {
        self.take_full(keys, token, kind, lease_ms, 0, 0, HOUR, 5_000).unwrap()
    }

    fn renew(&self, keys: &[&str], token: &str, lease_ms: i64) -> PgResult<i32> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let sql = format!("SELECT {}($1, $2, $3, $4, $5)", self.fname("_renew"));
        self.runtime
            .block_on(self.client.query_one(&sql, &[&NS, &keys, &token, &lease_ms, &5_000i64]))
            .map(|row| row.get::<_, i32>(0))
            .map_err(err_text)
    }

    fn give_back(&self, keys: &[&str], token: &str, retry: bool) -> PgResult<i32> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let sql = format!("SELECT {}($1, $2, $3, $4, $5, $6)", self.fname("_give_back"));
        self.runtime
            .block_on(self.client.query_one(&sql, &[&NS, &keys, &token, &CHANNEL, &retry, &5_000i64]))
            .map(|row| row.get::<_, i32>(0))
            .map_err(err_text)
    }

    fn withdraw(&self, keys: &[&str], token: &str) -> PgResult<i32> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let sql = format!("SELECT {}($1, $2, $3, $4, $5)", self.fname("_withdraw"));
        self.runtime
            .block_on(self.client.query_one(&sql, &[&NS, &keys, &token, &CHANNEL, &5_000i64]))
            .map(|row| row.get::<_, i32>(0))
            .map_err(err_text)
    }

    fn fence_counter(&self, key: &str) -> Option<i64> {
        let sql = format!("SELECT fence FROM \"{}\".dokebi_lock WHERE namespace = $1 AND key = $2", self.schema);
        self.runtime.block_on(self.client.query_opt(&sql, &[&NS, &key])).unwrap().map(|row| row.get(0))
    }

    fn force_release(&self, key: &str, expected: Option<i64>, retention_ms: i64) -> PgResult<Vec<i64>> {
        let sql = format!("SELECT {}($1, $2, $3, $4, $5, $6)", self.fname("_force_release"));
        self.runtime
            .block_on(self.client.query_one(&sql, &[&NS, &key, &CHANNEL, &retention_ms, &expected, &5_000i64]))
            .map(|row| row.get::<_, Vec<i64>>(0))
            .map_err(err_text)
    }

    /// A hand-over: `released` keys of `released_token`, then requests
    /// (token, kind, lease, keys).
    fn hand_over(&self, released: &[&str], released_token: &str, requests: &[(&str, Kind, i64, Vec<&str>)], waiting_ms: i64, retention_ms: i64) -> PgResult<Vec<i64>> {
        let released: Vec<String> = released.iter().map(|k| k.to_string()).collect();
        let leases: Vec<i64> = requests.iter().map(|r| r.2).collect();
        let retentions: Vec<i64> = requests.iter().map(|_| retention_ms).collect();
        let tokens: Vec<String> = requests.iter().map(|r| r.0.to_owned()).collect();
        let shared: Vec<bool> = requests.iter().map(|r| r.1 .0).collect();
        let limits: Vec<i32> = requests.iter().map(|r| r.1 .1).collect();
        let weights: Vec<i32> = requests.iter().map(|r| r.1 .2).collect();
        let tickets: Vec<i64> = requests.iter().map(|_| 0).collect();
        let counts: Vec<i32> = requests.iter().map(|r| r.3.len() as i32).collect();
        let keys: Vec<String> = requests.iter().flat_map(|r| r.3.iter().map(|k| k.to_string())).collect();
        let sql = format!("SELECT {}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)", self.fname("_hand_over"));
        self.runtime
            .block_on(self.client.query_one(
                &sql,
                &[
                    &NS, &CHANNEL, &leases, &waiting_ms, &retentions, &5_000i64, &released, &released_token, &tokens, &shared, &limits, &weights,
                    &tickets, &counts, &keys,
                ],
            ))
            .map(|row| row.get::<_, Vec<i64>>(0))
            .map_err(err_text)
    }

    fn lock_keys(&self, keys: &[&str]) -> Vec<String> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let sql = format!("SELECT {}($1, $2)", self.fname("_lock_keys"));
        self.runtime.block_on(self.client.query_one(&sql, &[&NS, &keys])).unwrap().get(0)
    }

    /// This session's backend waits for a lock (a row's).
    fn waits_for_lock(&self) -> bool {
        let probe = runtime();
        probe.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url_of(self), NoTls).await.unwrap();
            tokio::spawn(connection);
            let row = client.query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&self.pid]).await.unwrap();
            row.get::<_, i64>(0) == 1
        })
    }
}

fn url_of(session: &Session) -> String {
    session.url.clone()
}

/// Runs `call` in a thread on `session` (moved there), which is expected
/// to wait for a row lock; answers the thread's handle once it waits.
fn in_background<T: Send + 'static>(session: Session, call: impl FnOnce(&Session) -> T + Send + 'static) -> thread::JoinHandle<(Session, T)> {
    let pid = session.pid;
    let url = url_of(&session);
    let handle = thread::spawn(move || {
        let answer = call(&session);
        (session, answer)
    });
    let probe = runtime();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting = probe.block_on(async {
            let (client, connection) = tokio_postgres::connect(&url, NoTls).await.unwrap();
            tokio::spawn(connection);
            let row = client
                .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&pid])
                .await
                .unwrap();
            row.get::<_, i64>(0) == 1
        });
        if waiting {
            return handle;
        }
        assert!(Instant::now() < deadline, "the call never waited for a lock");
        assert!(!handle.is_finished(), "the call finished without waiting");
        thread::sleep(Duration::from_millis(10));
    }
}

/// The live holder rows of `key`: (slot, token, fence).
fn live_holders(s: &Session, schema: &Schema, key: &str) -> Vec<(i32, String, Option<i64>)> {
    s.runtime
        .block_on(s.client.query(
            &format!(
                "SELECT slot, token, fence FROM {} WHERE namespace = $1 AND key = $2 AND expires_at > clock_timestamp() ORDER BY slot",
                schema.t("_holders")
            ),
            &[&NS, &key],
        ))
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn all_holders(s: &Session, schema: &Schema, key: &str) -> Vec<(i32, String, String)> {
    s.runtime
        .block_on(s.client.query(
            &format!(
                "SELECT slot, token, CASE WHEN expires_at = '-infinity' THEN 'released' WHEN expires_at = 'epoch' THEN 'dead' \
                 WHEN expires_at > clock_timestamp() THEN 'live' ELSE 'expired' END FROM {} WHERE namespace = $1 AND key = $2 ORDER BY slot",
                schema.t("_holders")
            ),
            &[&NS, &key],
        ))
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

// ---------------------------------------------------------------------
// Differential: functions 13 and 14, the same calls, the same answers.
// ---------------------------------------------------------------------

/// xorshift64*, seeded.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<'a, T>(&mut self, of: &'a [T]) -> &'a T {
        &of[self.below(of.len() as u64) as usize]
    }
}

const KEYS: [&str; 3] = ["a", "b", "c"];
const TOKENS: [&str; 4] = ["t0", "t1", "t2", "t3"];
const KINDS: [Kind; 4] = [EXCLUSIVE, SHARED, COUNTED, COUNTED2];

/// One call, as both versions get it.
#[derive(Clone, Debug)]
enum Op {
    Take { keys: Vec<&'static str>, token: &'static str, kind: Kind, lease: i64, waiting: i64, retention: i64 },
    Renew { keys: Vec<&'static str>, token: &'static str, lease: i64 },
    GiveBack { keys: Vec<&'static str>, token: &'static str, retry: bool },
    Withdraw { keys: Vec<&'static str>, token: &'static str },
    /// stale: an expected counter that is not the key's.
    Force { key: &'static str, stale: bool, retention: i64 },
    HandOver { released: Vec<&'static str>, token: &'static str, requests: Vec<(&'static str, Kind, i64, Vec<&'static str>)>, waiting: i64, retention: i64 },
    /// Two takes of one token in one transaction (a retry within it), the
    /// first after a lock_keys of its keys.
    TakeTwiceInOneTransaction { keys: Vec<&'static str>, token: &'static str, kind: Kind },
}

fn some_keys(rng: &mut Rng) -> Vec<&'static str> {
    (0..1 + rng.below(3)).map(|_| *rng.pick(&KEYS)).collect()
}

fn random_op(rng: &mut Rng) -> Op {
    let lease = |rng: &mut Rng| if rng.chance(30) { 0 } else { HOUR };
    let retention = |rng: &mut Rng| if rng.chance(25) { 0 } else { HOUR };
    match rng.below(100) {
        0..=37 => Op::Take {
            keys: some_keys(rng),
            token: *rng.pick(&TOKENS),
            kind: *rng.pick(&KINDS),
            lease: lease(rng),
            waiting: if rng.chance(40) { HOUR } else { 0 },
            retention: retention(rng),
        },
        38..=47 => Op::Renew { keys: some_keys(rng), token: *rng.pick(&TOKENS), lease: lease(rng) },
        48..=67 => Op::GiveBack { keys: some_keys(rng), token: *rng.pick(&TOKENS), retry: rng.chance(30) },
        68..=74 => Op::Withdraw { keys: some_keys(rng), token: *rng.pick(&TOKENS) },
        75..=80 => Op::Force { key: *rng.pick(&KEYS), stale: rng.chance(20), retention: retention(rng) },
        81..=95 => {
            let released = if rng.chance(80) { some_keys(rng) } else { vec![] };
            let requests = (0..1 + rng.below(3)).map(|_| (*rng.pick(&TOKENS), *rng.pick(&KINDS), lease(rng), some_keys(rng))).collect();
            Op::HandOver { released, token: *rng.pick(&TOKENS), requests, waiting: if rng.chance(40) { HOUR } else { 0 }, retention: retention(rng) }
        }
        _ => Op::TakeTwiceInOneTransaction { keys: some_keys(rng), token: *rng.pick(&TOKENS), kind: *rng.pick(&KINDS) },
    }
}

/// A value of an answer as both versions must give it: a fence or a
/// ticket (server clock in µs) is F, a hint (ms until an hour's lease
/// ends) H.
fn norm(v: i64) -> String {
    if v > 1_000_000_000_000 {
        "F".into()
    } else if v > 1_000 {
        "H".into()
    } else {
        v.to_string()
    }
}

fn norm_all(answer: &PgResult<Vec<i64>>) -> String {
    match answer {
        Ok(values) => values.iter().map(|&v| norm(v)).collect::<Vec<_>>().join(","),
        Err(e) => format!("error {e}"),
    }
}

/// The fences a take answer grants, by key.
fn granted(keys: &[&str], answer: &[i64]) -> Vec<(String, i64)> {
    if answer.first() == Some(&1) {
        // One fence per distinct key, in the order of their first places.
        let mut distinct: Vec<&str> = vec![];
        for k in keys {
            if !distinct.contains(k) {
                distinct.push(k);
            }
        }
        assert_eq!(answer.len(), 1 + distinct.len(), "a grant answers a fence per key: {answer:?} for {keys:?}");
        distinct.iter().enumerate().map(|(i, k)| (k.to_string(), answer[1 + i])).collect()
    } else {
        vec![]
    }
}

/// Runs `op` on `s`: its normalized answer, the fences it granted.
fn run_op(s: &Session, op: &Op) -> (String, Vec<(String, i64)>) {
    match op {
        Op::Take { keys, token, kind, lease, waiting, retention } => {
            let answer = s.take_full(keys, token, *kind, *lease, *waiting, 0, *retention, 5_000);
            let fences = answer.as_ref().map(|a| granted(keys, a)).unwrap_or_default();
            (norm_all(&answer), fences)
        }
        Op::Renew { keys, token, lease } => (format!("{:?}", s.renew(keys, token, *lease)), vec![]),
        Op::GiveBack { keys, token, retry } => (format!("{:?}", s.give_back(keys, token, *retry)), vec![]),
        Op::Withdraw { keys, token } => (format!("{:?}", s.withdraw(keys, token)), vec![]),
        Op::Force { key, stale, retention } => {
            let counter = s.fence_counter(key);
            let expected = if *stale { Some(counter.unwrap_or(0) + 7) } else { counter };
            let answer = s.force_release(key, expected, *retention);
            let fences = match &answer {
                Ok(a) if a[0] >= 0 => vec![(key.to_string(), a[1])],
                _ => vec![],
            };
            (norm_all(&answer), fences)
        }
        Op::HandOver { released, token, requests, waiting, retention } => {
            let answer = s.hand_over(released, token, requests, *waiting, *retention);
            let mut fences = vec![];
            if let Ok(a) = &answer {
                let mut at = 1 + released.len();
                for request in requests {
                    if at >= a.len() {
                        break;
                    }
                    match a[at] {
                        1 => {
                            let distinct = request.3.iter().collect::<BTreeSet<_>>().len();
                            fences.extend(granted(&request.3, &a[at..at + 1 + distinct]));
                            at += 1 + distinct;
                        }
                        0 => at += 3,
                        _ => at += 2,
                    }
                }
                assert_eq!(at, a.len(), "a hand-over answer parsed whole: {a:?} of {op:?}");
            }
            (norm_all(&answer), fences)
        }
        Op::TakeTwiceInOneTransaction { keys, token, kind } => {
            s.exec("BEGIN");
            let sorted = s.lock_keys(keys);
            let first = s.take_full(keys, token, *kind, HOUR, 0, 0, HOUR, 5_000);
            let second = s.take_full(keys, token, *kind, HOUR, 0, 0, HOUR, 5_000);
            s.exec("COMMIT");
            let mut fences = first.as_ref().map(|a| granted(keys, a)).unwrap_or_default();
            fences.extend(second.as_ref().map(|a| granted(keys, a)).unwrap_or_default());
            (format!("{sorted:?} {} / {}", norm_all(&first), norm_all(&second)), fences)
        }
    }
}

/// The tables' rows, with times as classes: what both versions must leave.
fn state(s: &Session, schema: &Schema) -> Vec<String> {
    let class = |column: &str| {
        format!(
            "CASE WHEN {column} = '-infinity' THEN 'released' WHEN {column} = 'epoch' THEN 'dead' \
             WHEN {column} > clock_timestamp() THEN 'live' ELSE 'lapsed' END"
        )
    };
    let queries = [
        format!("SELECT 'key ' || key || ' fence>0 ' || (fence > 0) FROM {} ORDER BY key", schema.t("")),
        format!(
            "SELECT 'holder ' || h.key || '/' || h.slot || ' ' || h.token || ' ' || h.shared || ' ' || h.lim || ' ' || h.weight || ' ' || {} \
             || ' fence ' || coalesce((h.fence = k.fence)::text, 'null') || ' ' || coalesce((h.fence > 0)::text, 'null') \
             FROM {} h LEFT JOIN {} k ON k.namespace = h.namespace AND k.key = h.key ORDER BY h.key, h.slot",
            class("h.expires_at"),
            schema.t("_holders"),
            schema.t("")
        ),
        format!(
            "SELECT 'mark ' || key || '/' || slot || ' ' || token || ' ' || shared || ' ' || lim || ' ' || {} || ' ' || (ticket > 0) FROM {} ORDER BY key, slot",
            class("lapses_at"),
            schema.t("_waiting")
        ),
    ];
    let mut rows = vec![];
    for q in queries {
        for row in s.runtime.block_on(s.client.query(q.as_str(), &[])).unwrap() {
            rows.push(row.get::<_, String>(0));
        }
    }
    rows
}

/// Live holders of one key that no take would grant side by side.
fn exclusion_broken(s: &Session, schema: &Schema) -> Vec<String> {
    let sql = format!(
        "SELECT key || ': ' || string_agg(token || '(' || shared || ',' || lim || ',' || weight || ')', ' ') FROM {} \
         WHERE expires_at > clock_timestamp() GROUP BY namespace, key \
         HAVING count(DISTINCT lim) > 1 OR (bool_or(NOT shared) AND max(lim) = 1 AND count(*) > 1) OR (max(lim) > 1 AND sum(weight) > max(lim))",
        schema.t("_holders")
    );
    s.runtime.block_on(s.client.query(sql.as_str(), &[])).unwrap().iter().map(|r| r.get(0)).collect()
}

fn differential(seed: u64, steps: usize, settings: &str) {
    let (old, new) = (Schema::fresh(&url(), "d13"), Schema::fresh(&url(), "d14"));
    old.install(false, true);
    new.install(true, false);
    let (s13, s14) = (old.session("dokebi_lock"), new.session("dokebi_lock"));
    for s in [&s13, &s14] {
        s.listen();
        if !settings.is_empty() {
            s.exec(settings);
        }
    }
    let mut rng = Rng(seed);
    let mut last: [HashMap<String, i64>; 2] = [HashMap::new(), HashMap::new()];
    let mut history: Vec<String> = vec![];
    // Notifications are compared in sum every 25 calls, once delivered
    // (a session's own arrive when its backend gets to them, not always
    // before the answer to its next statement).
    let mut heard: [BTreeMap<String, usize>; 2] = Default::default();
    let settle = |s13: &Session, s14: &Session, heard: &mut [BTreeMap<String, usize>; 2], history: &[String]| {
        thread::sleep(Duration::from_millis(60));
        for (v, s) in [s13, s14].into_iter().enumerate() {
            for note in s.notes() {
                *heard[v].entry(note).or_default() += 1;
            }
        }
        assert_eq!(heard[0], heard[1], "notifications differ (13 then 14) by step {}:\n{}", history.len(), history.join("\n"));
    };
    for step in 0..steps {
        let op = random_op(&mut rng);
        // Alternate which version goes first, so neither is always later on the clock.
        let order: [usize; 2] = if step % 2 == 0 { [0, 1] } else { [1, 0] };
        let mut out: [(String, Vec<String>, BTreeSet<String>); 2] = Default::default();
        for &v in &order {
            let (s, schema) = if v == 0 { (&s13, &old) } else { (&s14, &new) };
            let (answer, fences) = run_op(s, &op);
            for (key, fence) in fences {
                if let Some(&before) = last[v].get(&key) {
                    assert!(fence > before, "functions {}: fence of {key} {fence} after {before} at step {step} ({op:?})\n{}", 13 + v, history.join("\n"));
                }
                last[v].insert(key, fence);
            }
            let notes = BTreeSet::new();
            for note in s.notes() {
                *heard[v].entry(note).or_default() += 1;
            }
            let broken = exclusion_broken(s, schema);
            assert!(broken.is_empty(), "functions {}: two holders at step {step} ({op:?}): {broken:?}\n{}", 13 + v, history.join("\n"));
            out[v] = (answer, state(s, schema), notes);
        }
        history.push(format!("{step}: {op:?} -> {}", out[1].0));
        assert_eq!(out[0].0, out[1].0, "answers differ at step {step} ({op:?})\n{}", history.join("\n"));
        assert_eq!(out[0].2, out[1].2, "notifications differ at step {step} ({op:?}) (13: {:?}, 14: {:?})\n{}", out[0].2, out[1].2, history.join("\n"));
        assert_eq!(out[0].1, out[1].1, "tables differ at step {step} ({op:?})\n{}", history.join("\n"));
        if step % 25 == 24 {
            settle(&s13, &s14, &mut heard, &history);
        }
    }
    settle(&s13, &s14, &mut heard, &history);
    assert!(heard[1].values().sum::<usize>() > 0, "some notifications heard");
}

/// Held: 3 x 400 random calls (takes of 1-3 keys with repeats, four kinds,
/// leases of 0 ms (lapsed at once) or an hour, marks, retention 0 (every
/// release cleans up) or an hour; renewals; give-backs and their retries;
/// withdrawals; force-releases, current and stale; hand-overs of several
/// requests; two takes of one token in one transaction after lock_keys)
/// on functions 13 and on functions 14: the same answers, the same
/// notifications, the same rows, rising fences, no two holders.
#[test]
fn r68_functions_14_answer_as_13_call_for_call() {
    for seed in [0x9e37_79b9_7f4a_7c15, 0x1234_5678_9abc_def1, 0xdead_beef_cafe_f00d] {
        differential(seed, 400, "");
    }
}

/// Held: the same under session settings a pooler's other client or a DBA
/// may leave: PL/pgSQL's extra checks as errors (too_many_rows,
/// strict_multi_assignment, shadowed_variables), parallel plans forced,
/// JIT for every statement, custom plans, synchronous_commit off.
#[test]
fn r68_functions_14_answer_as_13_under_hostile_session_settings() {
    differential(
        0x5151_7171_9191_b1b1,
        300,
        "SET plpgsql.extra_errors = 'all'; SET plpgsql.extra_warnings = 'all'; SET force_parallel_mode = on; \
         SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; \
         SET jit = on; SET jit_above_cost = 0; SET jit_inline_above_cost = 0; SET jit_optimize_above_cost = 0; \
         SET plan_cache_mode = force_custom_plan; SET synchronous_commit = off; SET enable_indexscan = off; SET enable_bitmapscan = off",
    );
}

// ---------------------------------------------------------------------
// Both builds on one schema, under load, with the invariants checked by
// the server at each commit.
// ---------------------------------------------------------------------

/// Triggers of the test's own: at each commit, no key has live holders a
/// take would not grant side by side (R6801), and no key row's fence
/// moves other than up (R6802).
fn add_invariant_triggers(schema: &Schema) {
    let s = &schema.name;
    schema.batch(&format!(
        r#"CREATE FUNCTION "{s}".r68_exclusion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM "{s}".dokebi_lock_holders h WHERE h.namespace = NEW.namespace AND h.key = NEW.key AND h.expires_at > clock_timestamp()
             GROUP BY h.namespace, h.key
             HAVING count(DISTINCT h.lim) > 1 OR (bool_or(NOT h.shared) AND max(h.lim) = 1 AND count(*) > 1) OR (max(h.lim) > 1 AND sum(h.weight) > max(h.lim))) THEN
    RAISE EXCEPTION 'R68 two holders of %: %', NEW.key,
      (SELECT string_agg(h.slot || ':' || h.token || '/' || h.shared || '/' || h.lim || '/' || h.weight || '/' || h.fence, ' ')
       FROM "{s}".dokebi_lock_holders h WHERE h.namespace = NEW.namespace AND h.key = NEW.key AND h.expires_at > clock_timestamp())
      USING ERRCODE = 'R6801';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER r68_exclusion AFTER INSERT OR UPDATE ON "{s}".dokebi_lock_holders DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW EXECUTE FUNCTION "{s}".r68_exclusion();
CREATE FUNCTION "{s}".r68_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.fence <= OLD.fence THEN
    RAISE EXCEPTION 'R68 fence of % from % to %', NEW.key, OLD.fence, NEW.fence USING ERRCODE = 'R6802';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER r68_fence BEFORE UPDATE ON "{s}".dokebi_lock FOR EACH ROW EXECUTE FUNCTION "{s}".r68_fence();"#
    ));
}

/// Held: six sessions for 10 s, each call made by functions 13 or 14 at
/// random (processes of both builds during a rolling upgrade) on one
/// schema's tables: takes of 1-3 of 4 keys of four kinds with short
/// leases and marks, renewals, give-backs and retries, withdrawals,
/// hand-overs, force-releases, clean-ups (retention 0): no commit ever had
/// two holders of a key or lowered a fence (checked by triggers at
/// commit), no fence granted twice, each give-back's retry counted no
/// more than the keys.
#[test]
fn r68_builds_13_and_14_side_by_side_under_load() {
    let schema = Schema::fresh(&url(), "mix");
    schema.install(true, true);
    add_invariant_triggers(&schema);
    let fences: Arc<Mutex<Vec<(String, i64, String)>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(AtomicUsize::new(0));
    let stop_at = Instant::now() + Duration::from_secs(10);
    let keys: [&'static str; 4] = ["a", "b", "c", "d"];
    let workers: Vec<_> = (0..6u64)
        .map(|w| {
            let (fences, errors, calls, grants) = (fences.clone(), errors.clone(), calls.clone(), grants.clone());
            let (s14, s13) = (schema.session("dokebi_lock"), schema.session("dokebi_lock13"));
            thread::spawn(move || {
                let mut rng = Rng(0x0123_4567_89ab_cdef ^ (w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                let mut held: Vec<(String, Vec<&'static str>)> = vec![];
                let mut n = 0;
                let note = |what: &str, r: &PgResult<Vec<i64>>| {
                    if let Err(e) = r {
                        errors.lock().unwrap().push(format!("{what}: {e}"));
                    }
                };
                while Instant::now() < stop_at {
                    n += 1;
                    calls.fetch_add(1, Ordering::Relaxed);
                    let s = if rng.chance(50) { &s14 } else { &s13 };
                    let which = if std::ptr::eq(s, &s14) { "14" } else { "13" };
                    let retention = *rng.pick(&[0i64, 50, HOUR]);
                    match rng.below(10) {
                        0..=3 => {
                            let mut ks: Vec<&'static str> = (0..1 + rng.below(3)).map(|_| *rng.pick(&keys)).collect();
                            ks.dedup();
                            let token = format!("w{w}_{n}");
                            let kind = *rng.pick(&KINDS);
                            let lease = 20 + rng.below(100) as i64;
                            let waiting = if rng.chance(20) { 50 } else { 0 };
                            let r = s.take_full(&ks, &token, kind, lease, waiting, 0, retention, 5_000);
                            note(&format!("take {which}"), &r);
                            if let Ok(a) = &r {
                                if a[0] == 1 {
                                    grants.fetch_add(1, Ordering::Relaxed);
                                    for (k, f) in granted(&ks, a) {
                                        fences.lock().unwrap().push((k, f, format!("take {which} {token}")));
                                    }
                                    // A retry whose answer was lost, now and then.
                                    if rng.chance(15) {
                                        let again = s.take_full(&ks, &token, kind, lease, 0, 0, retention, 5_000);
                                        note(&format!("retry {which}"), &again);
                                        if let Ok(b) = &again {
                                            if b[0] == 1 {
                                                for (k, f) in granted(&ks, b) {
                                                    fences.lock().unwrap().push((k, f, format!("retry {which} {token}")));
                                                }
                                            }
                                        }
                                    }
                                    held.push((token, ks));
                                } else if waiting > 0 {
                                    let r = s.withdraw(&ks, &token).map(|n| vec![n as i64]);
                                    note(&format!("withdraw {which}"), &r);
                                }
                            }
                        }
                        4 if !held.is_empty() => {
                            let (token, ks) = &held[rng.below(held.len() as u64) as usize];
                            let r = s.renew(ks, token, 20 + rng.below(200) as i64).map(|n| vec![n as i64]);
                            note(&format!("renew {which}"), &r);
                        }
                        5 | 6 if !held.is_empty() => {
                            let (token, ks) = held.swap_remove(rng.below(held.len() as u64) as usize);
                            let first = s.give_back(&ks, &token, false);
                            note(&format!("give_back {which}"), &first.clone().map(|n| vec![n as i64]));
                            if rng.chance(30) {
                                let retry = s.give_back(&ks, &token, true);
                                note(&format!("give_back retry {which}"), &retry.clone().map(|n| vec![n as i64]));
                                if let (Ok(f), Ok(r)) = (&first, &retry) {
                                    if *r as usize > ks.len() || (*f as usize) > ks.len() {
                                        errors.lock().unwrap().push(format!("R68 give_back retry {which} counted {r} after {f} of {ks:?}"));
                                    }
                                }
                            }
                        }
                        7 if !held.is_empty() => {
                            let (token, ks) = held.swap_remove(rng.below(held.len() as u64) as usize);
                            let next = format!("w{w}_{n}h");
                            let want: Vec<&'static str> = vec![*rng.pick(&keys)];
                            let kind = *rng.pick(&KINDS);
                            let r = s.hand_over(&ks, &token, &[(next.as_str(), kind, 100, want.clone())], 0, retention);
                            note(&format!("hand_over {which}"), &r);
                            if let Ok(a) = &r {
                                let at = 1 + ks.len();
                                if a[at] == 1 {
                                    fences.lock().unwrap().push((want[0].to_owned(), a[at + 1], format!("hand_over {which} {next}")));
                                    held.push((next, want));
                                }
                            }
                        }
                        8 => {
                            let key = *rng.pick(&keys);
                            let expected = s.fence_counter(key);
                            let r = s.force_release(key, expected, retention);
                            note(&format!("force {which}"), &r);
                            if let Ok(a) = &r {
                                if a[0] >= 0 {
                                    fences.lock().unwrap().push((key.to_owned(), a[1], format!("force {which}")));
                                }
                            }
                        }
                        _ => thread::sleep(Duration::from_millis(rng.below(5))),
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let errors = errors.lock().unwrap().clone();
    let violations: Vec<&String> = errors.iter().filter(|e| e.contains("R68")).collect();
    assert!(violations.is_empty(), "{} violations: {violations:#?}", violations.len());
    assert!(errors.is_empty(), "errors: {errors:#?}");
    let fences = fences.lock().unwrap().clone();
    let mut seen: BTreeMap<(String, i64), String> = BTreeMap::new();
    for (k, f, what) in &fences {
        if let Some(before) = seen.insert((k.clone(), *f), what.clone()) {
            panic!("fence {f} of {k} granted twice: {before} and {what}");
        }
    }
    eprintln!("{} calls, {} grants, {} fences", calls.load(Ordering::Relaxed), grants.load(Ordering::Relaxed), fences.len());
    assert!(grants.load(Ordering::Relaxed) > 500, "enough grants to mean something");
}
