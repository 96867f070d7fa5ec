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
//! Outcome: nothing broke. Every attack below held against a real
//! PostgreSQL 15 (the shared server, and a private one for the crashes):
//! - `r68_functions_14_answer_as_13_call_for_call`: 3 x 400 random calls
//!   on a schema of 13 and one of 14, same answers, notifications and rows;
//! - `r68_functions_14_answer_as_13_under_hostile_session_settings`: the
//!   same under PL/pgSQL extra checks as errors, forced parallel plans,
//!   custom plans, synchronous_commit off, no index scans (JIT for every
//!   statement held too, in a run of 260 s, and is left out);
//! - `r68_builds_13_and_14_side_by_side_under_load`: both builds on one
//!   schema's tables, six sessions, invariants checked by triggers at commit;
//! - `r68_a_renewal_committing_while_a_take_waits`,
//!   `r68_a_give_back_committing_while_a_take_waits`,
//!   `r68_a_force_release_committing_while_a_take_waits`,
//!   `r68_a_clean_up_committing_while_a_take_waits`,
//!   `r68_a_grant_committing_while_a_take_waits_takes_another_slot`,
//!   `r68_a_retry_waiting_behind_its_own_first_attempt`,
//!   `r68_a_key_row_made_in_the_same_transaction`: interleavings held open,
//!   13 holding while 14 waits, 14 while 13 waits, and 14 alone;
//! - `r68_a_release_of_several_keys_wakes_the_waited_ones_once`: wake-ups
//!   and counts of give_back and hand_over;
//! - `r68_fences_and_releases_across_crashes`: fences, lost and flushed
//!   releases, a break, across crashes.
//!
//! Run: `cargo test -p dokebi-lock --test review_r68 -- --test-threads=2`

#![allow(dead_code)]

mod builds;
#[path = "postgres/server.rs"]
mod server;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use builds::{constant, source_at};
use futures::StreamExt;
use tokio_postgres::{AsyncMessage, NoTls};

/// The last commit of functions 13.
const PREVIOUS_BUILD: &str = "b336be7ec279b6d656ce21c3a16fb76184c3545d";
const NS: &str = "r68ns";
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
            let src = source_at(PREVIOUS_BUILD, "src/postgres/schema.rs");
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
    /// The channel releases are announced on: one per schema.
    channel: String,
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
        Session {
            runtime,
            client,
            notes,
            f: format!("\"{schema}\".\"{functions}"),
            schema: schema.to_owned(),
            url: url.to_owned(),
            pid,
            channel: format!("{schema}_channel"),
        }
    }

    fn exec(&self, sql: &str) {
        self.runtime.block_on(self.client.batch_execute(sql)).unwrap_or_else(|e| panic!("{sql}: {}", err_text(e)));
    }

    fn try_exec(&self, sql: &str) -> PgResult<()> {
        self.runtime.block_on(self.client.batch_execute(sql)).map_err(err_text)
    }

    fn listen(&self) {
        self.exec(&format!("LISTEN \"{}\"", self.channel));
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
            .block_on(self.client.query_one(&sql, &[&NS, &keys, &token, &self.channel.as_str(), &retry, &5_000i64]))
            .map(|row| row.get::<_, i32>(0))
            .map_err(err_text)
    }

    fn withdraw(&self, keys: &[&str], token: &str) -> PgResult<i32> {
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let sql = format!("SELECT {}($1, $2, $3, $4, $5)", self.fname("_withdraw"));
        self.runtime
            .block_on(self.client.query_one(&sql, &[&NS, &keys, &token, &self.channel.as_str(), &5_000i64]))
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
            .block_on(self.client.query_one(&sql, &[&NS, &key, &self.channel.as_str(), &retention_ms, &expected, &5_000i64]))
            .map(|row| row.get::<_, Vec<i64>>(0))
            .map_err(err_text)
    }

    /// A hand-over: `released` keys of `released_token`, then requests
    /// (token, kind, lease, keys).
    fn hand_over(
        &self,
        released: &[&str],
        released_token: &str,
        requests: &[(&str, Kind, i64, Vec<&str>)],
        waiting_ms: i64,
        retention_ms: i64,
    ) -> PgResult<Vec<i64>> {
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
                    &NS,
                    &self.channel.as_str(),
                    &leases,
                    &waiting_ms,
                    &retentions,
                    &5_000i64,
                    &released,
                    &released_token,
                    &tokens,
                    &shared,
                    &limits,
                    &weights,
                    &tickets,
                    &counts,
                    &keys,
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
            let row = client
                .query_one("SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", &[&self.pid])
                .await
                .unwrap();
            row.get::<_, i64>(0) == 1
        })
    }
}

fn url_of(session: &Session) -> String {
    session.url.clone()
}

/// Runs `call` in a thread on `session` (moved there), which is expected
/// to wait for a row lock; answers the thread's handle once it waits.
fn in_background<T: Send + 'static>(
    session: Session,
    call: impl FnOnce(&Session) -> T + Send + 'static,
) -> thread::JoinHandle<(Session, T)> {
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

/// The holder rows of `key` (`columns`, those `filter` keeps), by slot.
fn holder_rows(s: &Session, schema: &Schema, key: &str, columns: &str, filter: &str) -> Vec<tokio_postgres::Row> {
    let sql = format!("SELECT {columns} FROM {} WHERE namespace = $1 AND key = $2 {filter} ORDER BY slot", schema.t("_holders"));
    s.runtime.block_on(s.client.query(&sql, &[&NS, &key])).unwrap()
}

/// The live holder rows of `key`: (slot, token, fence).
fn live_holders(s: &Session, schema: &Schema, key: &str) -> Vec<(i32, String, Option<i64>)> {
    let rows = holder_rows(s, schema, key, "slot, token, fence", "AND expires_at > clock_timestamp()");
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
}

/// Every holder row of `key`: (slot, token, released, dead, live or expired).
fn all_holders(s: &Session, schema: &Schema, key: &str) -> Vec<(i32, String, String)> {
    let state = "CASE WHEN expires_at = '-infinity' THEN 'released' WHEN expires_at = 'epoch' THEN 'dead' \
                 WHEN expires_at > clock_timestamp() THEN 'live' ELSE 'expired' END";
    let rows = holder_rows(s, schema, key, &format!("slot, token, {state}"), "");
    rows.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
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
    fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[self.below(of.len() as u64) as usize]
    }
}

const KEYS: [&str; 3] = ["a", "b", "c"];
const TOKENS: [&str; 4] = ["t0", "t1", "t2", "t3"];
const KINDS: [Kind; 4] = [EXCLUSIVE, SHARED, COUNTED, COUNTED2];

/// One call, as both versions get it.
#[derive(Clone, Debug)]
enum Op {
    Take {
        keys: Vec<&'static str>,
        token: &'static str,
        kind: Kind,
        lease: i64,
        waiting: i64,
        retention: i64,
    },
    Renew {
        keys: Vec<&'static str>,
        token: &'static str,
        lease: i64,
    },
    GiveBack {
        keys: Vec<&'static str>,
        token: &'static str,
        retry: bool,
    },
    Withdraw {
        keys: Vec<&'static str>,
        token: &'static str,
    },
    /// stale: an expected counter that is not the key's.
    Force {
        key: &'static str,
        stale: bool,
        retention: i64,
    },
    HandOver {
        released: Vec<&'static str>,
        token: &'static str,
        requests: Vec<(&'static str, Kind, i64, Vec<&'static str>)>,
        waiting: i64,
        retention: i64,
    },
    /// Two takes of one token in one transaction (a retry within it), the
    /// first after a lock_keys of its keys.
    TakeTwiceInOneTransaction {
        keys: Vec<&'static str>,
        token: &'static str,
        kind: Kind,
    },
}

fn some_keys(rng: &mut Rng) -> Vec<&'static str> {
    (0..1 + rng.below(3)).map(|_| rng.pick(&KEYS)).collect()
}

fn random_op(rng: &mut Rng) -> Op {
    let lease = |rng: &mut Rng| if rng.chance(30) { 0 } else { HOUR };
    let retention = |rng: &mut Rng| if rng.chance(25) { 0 } else { HOUR };
    match rng.below(100) {
        0..=37 => Op::Take {
            keys: some_keys(rng),
            token: rng.pick(&TOKENS),
            kind: rng.pick(&KINDS),
            lease: lease(rng),
            waiting: if rng.chance(40) { HOUR } else { 0 },
            retention: retention(rng),
        },
        38..=47 => Op::Renew { keys: some_keys(rng), token: rng.pick(&TOKENS), lease: lease(rng) },
        48..=67 => Op::GiveBack { keys: some_keys(rng), token: rng.pick(&TOKENS), retry: rng.chance(30) },
        68..=74 => Op::Withdraw { keys: some_keys(rng), token: rng.pick(&TOKENS) },
        75..=80 => Op::Force { key: rng.pick(&KEYS), stale: rng.chance(20), retention: retention(rng) },
        81..=95 => {
            let released = if rng.chance(80) { some_keys(rng) } else { vec![] };
            let requests = (0..1 + rng.below(3)).map(|_| (rng.pick(&TOKENS), rng.pick(&KINDS), lease(rng), some_keys(rng))).collect();
            Op::HandOver {
                released,
                token: rng.pick(&TOKENS),
                requests,
                waiting: if rng.chance(40) { HOUR } else { 0 },
                retention: retention(rng),
            }
        }
        _ => Op::TakeTwiceInOneTransaction { keys: some_keys(rng), token: rng.pick(&TOKENS), kind: rng.pick(&KINDS) },
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
                    assert!(
                        fence > before,
                        "functions {}: fence of {key} {fence} after {before} at step {step} ({op:?})\n{}",
                        13 + v,
                        history.join("\n")
                    );
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
        assert_eq!(
            out[0].2,
            out[1].2,
            "notifications differ at step {step} ({op:?}) (13: {:?}, 14: {:?})\n{}",
            out[0].2,
            out[1].2,
            history.join("\n")
        );
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
/// custom plans, synchronous_commit off. (JIT for every statement held too,
/// but made this test 260 s long: each call compiled its plans again.)
#[test]
fn r68_functions_14_answer_as_13_under_hostile_session_settings() {
    differential(
        0x5151_7171_9191_b1b1,
        80,
        "SET plpgsql.extra_errors = 'all'; SET plpgsql.extra_warnings = 'all'; SET force_parallel_mode = on; \
         SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0; SET min_parallel_table_scan_size = 0; \
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
                    let retention = rng.pick(&[0i64, 50, HOUR]);
                    match rng.below(10) {
                        0..=3 => {
                            let mut ks: Vec<&'static str> = (0..1 + rng.below(3)).map(|_| rng.pick(&keys)).collect();
                            ks.dedup();
                            let token = format!("w{w}_{n}");
                            let kind = rng.pick(&KINDS);
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
                            let want: Vec<&'static str> = vec![rng.pick(&keys)];
                            let kind = rng.pick(&KINDS);
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
                            let key = rng.pick(&keys);
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

// ---------------------------------------------------------------------
// Interleavings: an operation held uncommitted while a take waits for the
// key row, then committed. Each in both directions between the builds
// (13 holds, 14 waits; 14 holds, 13 waits) and with 14 alone.
// ---------------------------------------------------------------------

const PAIRS: [(&str, &str); 3] = [("dokebi_lock", "dokebi_lock"), ("dokebi_lock13", "dokebi_lock"), ("dokebi_lock", "dokebi_lock13")];

fn assert_one_live(s: &Session, schema: &Schema, key: &str, token: &str, what: &str) {
    let live = live_holders(s, schema, key);
    assert_eq!(
        live.iter().map(|l| l.1.as_str()).collect::<Vec<_>>(),
        vec![token],
        "{what}: live holders of {key}: {live:?} (all: {:?})",
        all_holders(s, schema, key)
    );
}

/// Held: a renewal commits while a take waits for the key row, the
/// holder's first lease having ended meanwhile: the take sees the renewal
/// (refused, with a hint), never a second holder. Exclusive, shared and
/// counted takers.
#[test]
fn r68_a_renewal_committing_while_a_take_waits() {
    for (x_fns, b_fns) in PAIRS {
        for kind in [EXCLUSIVE, COUNTED2] {
            let schema = Schema::fresh(&url(), "renew");
            schema.install(true, true);
            let a = schema.session("dokebi_lock");
            let f1 = a.take(&["k"], "A", kind, 400)[1];
            let x = schema.session(x_fns);
            x.exec("BEGIN");
            assert_eq!(x.renew(&["k"], "A", HOUR), Ok(1));
            thread::sleep(Duration::from_millis(500));
            let taker = in_background(schema.session(b_fns), move |b| b.take_full(&["k"], "B", kind, HOUR, 0, 0, HOUR, 10_000));
            x.exec("COMMIT");
            let (_, answer) = taker.join().unwrap();
            let answer = answer.unwrap();
            assert_eq!(answer[0], 0, "{x_fns} renews, {b_fns} takes ({kind:?}): {answer:?}");
            assert!(answer[1] > 1_000_000, "the hint is the renewed lease: {answer:?}");
            assert_one_live(&a, &schema, "k", "A", "after the renewal");
            assert_eq!(a.fence_counter("k"), Some(f1));
        }
    }
}

/// Held: a give-back commits while a take waits: the take gets the freed
/// slot (0) and a fence above the first; the release counted 1.
#[test]
fn r68_a_give_back_committing_while_a_take_waits() {
    for (x_fns, b_fns) in PAIRS {
        let schema = Schema::fresh(&url(), "give");
        schema.install(true, true);
        let a = schema.session("dokebi_lock");
        let f1 = a.take(&["k", "j"], "A", EXCLUSIVE, HOUR)[1];
        let x = schema.session(x_fns);
        x.exec("BEGIN");
        assert_eq!(x.give_back(&["k", "j"], "A", false), Ok(2));
        let taker = in_background(schema.session(b_fns), |b| b.take_full(&["j", "k"], "B", EXCLUSIVE, HOUR, 0, 0, HOUR, 10_000));
        x.exec("COMMIT");
        let (_, answer) = taker.join().unwrap();
        let answer = answer.unwrap();
        assert_eq!(answer[0], 1, "{answer:?}");
        assert!(answer[2] > f1, "k's fence {} after {f1}", answer[2]);
        assert_one_live(&a, &schema, "k", "B", "after the release");
        assert_eq!(live_holders(&a, &schema, "k")[0].0, 0, "the freed slot reused");
        assert_eq!(live_holders(&a, &schema, "k")[0].2, Some(answer[2]), "its row keeps its fence");
        assert_eq!(a.give_back(&["k", "j"], "A", true), Ok(0), "A's rows are B's now: a retry counts none");
    }
}

/// Held: a force-release commits while a take waits: the take is granted
/// above the break's fence, the broken holder renews and releases nothing.
#[test]
fn r68_a_force_release_committing_while_a_take_waits() {
    for (x_fns, b_fns) in PAIRS {
        let schema = Schema::fresh(&url(), "force");
        schema.install(true, true);
        let a = schema.session("dokebi_lock");
        a.take(&["k"], "A", SHARED, HOUR);
        a.take(&["k"], "A2", SHARED, HOUR);
        let x = schema.session(x_fns);
        x.exec("BEGIN");
        let broke = x.force_release("k", x.fence_counter("k"), HOUR).unwrap();
        assert_eq!(broke[0], 2);
        let taker = in_background(schema.session(b_fns), |b| b.take_full(&["k"], "B", EXCLUSIVE, HOUR, 0, 0, HOUR, 10_000));
        x.exec("COMMIT");
        let (_, answer) = taker.join().unwrap();
        let answer = answer.unwrap();
        assert_eq!(answer[0], 1, "{answer:?}");
        assert!(answer[1] > broke[1], "fence {} after the break's {}", answer[1], broke[1]);
        assert_one_live(&a, &schema, "k", "B", "after the break");
        assert_eq!(a.renew(&["k"], "A", HOUR), Ok(0));
        assert_eq!(a.give_back(&["k"], "A2", true), Ok(0));
        assert_one_live(&a, &schema, "k", "B", "after the broken holders' calls");
    }
}

/// Held: a release's clean-up deletes an idle key row (retention passed)
/// while a take of that key waits for it: the take makes the row again and
/// its fence is above the one the deleted row had.
#[test]
fn r68_a_clean_up_committing_while_a_take_waits() {
    for (x_fns, b_fns) in PAIRS {
        let schema = Schema::fresh(&url(), "clean");
        schema.install(true, true);
        let a = schema.session("dokebi_lock");
        // k: granted with retention 0, released by A; then released again
        // by nobody: the row is idle and stale (A's released row keeps it
        // from A's own clean-up, so Z's release is the one that removes it).
        let f_old = a.take_full(&["k"], "A", EXCLUSIVE, HOUR, 0, 0, 0, 5_000).unwrap()[1];
        assert_eq!(a.give_back(&["k"], "A", false), Ok(1));
        // A's released row goes to C, which releases it: no row of A left.
        a.take_full(&["k"], "C", EXCLUSIVE, HOUR, 0, 0, 0, 5_000).unwrap();
        assert_eq!(a.give_back(&["k"], "C", false), Ok(1));
        a.take(&["j"], "Z", EXCLUSIVE, HOUR);
        let x = schema.session(x_fns);
        x.exec("BEGIN");
        assert_eq!(x.give_back(&["j"], "Z", false), Ok(1));
        let rows: i64 =
            x.runtime.block_on(x.client.query_one(&format!("SELECT count(*) FROM {} WHERE key = 'k'", schema.t("")), &[])).unwrap().get(0);
        if rows != 0 {
            // The stale row was C's own (skipped by C): Z's clean-up got it, or not.
            x.exec("ROLLBACK");
            panic!("{x_fns}: the clean-up left k's row (stale, idle)");
        }
        let taker = in_background(schema.session(b_fns), |b| b.take_full(&["k"], "B", EXCLUSIVE, HOUR, 0, 0, HOUR, 10_000));
        x.exec("COMMIT");
        let (_, answer) = taker.join().unwrap();
        let answer = answer.unwrap();
        assert_eq!(answer[0], 1, "{answer:?}");
        assert!(answer[1] > f_old, "fence {} after the deleted row's {f_old}", answer[1]);
        assert_one_live(&a, &schema, "k", "B", "after the clean-up");
    }
}

/// Held: a take of another token (shared, or counted with room) commits
/// while a take waits: the waiting one takes another slot (a new one, the
/// first having made slot 0), never the first's.
#[test]
fn r68_a_grant_committing_while_a_take_waits_takes_another_slot() {
    for (x_fns, b_fns) in PAIRS {
        for (first, second, both) in
            [(SHARED, SHARED, true), (COUNTED, COUNTED2, true), (COUNTED2, COUNTED2, false), (SHARED, EXCLUSIVE, false)]
        {
            let schema = Schema::fresh(&url(), "grant");
            schema.install(true, true);
            let a = schema.session("dokebi_lock");
            // Slots 0..2 exist, all free: 0 released (R), 1 and 2 lapsed (E, D).
            a.take(&["k"], "R", COUNTED, HOUR);
            a.take(&["k"], "E", COUNTED, 300);
            a.take(&["k"], "D", COUNTED, 300);
            a.give_back(&["k"], "R", false).unwrap();
            thread::sleep(Duration::from_millis(400));
            let before: Vec<i32> = all_holders(&a, &schema, "k").iter().map(|h| h.0).collect();
            assert_eq!(before, vec![0, 1, 2]);
            let x = schema.session(x_fns);
            x.exec("BEGIN");
            let fx = x.take(&["k"], "X", first, HOUR);
            assert_eq!(fx[0], 1);
            let taker = in_background(schema.session(b_fns), move |b| b.take_full(&["k"], "B", second, HOUR, 0, 0, HOUR, 10_000));
            x.exec("COMMIT");
            let (_, answer) = taker.join().unwrap();
            let answer = answer.unwrap();
            let live = live_holders(&a, &schema, "k");
            if both {
                assert_eq!(answer[0], 1, "{x_fns}/{b_fns} {first:?} {second:?}: {answer:?}");
                assert!(answer[1] > fx[1]);
                let tokens: BTreeSet<&str> = live.iter().map(|l| l.1.as_str()).collect();
                assert_eq!(tokens, BTreeSet::from(["X", "B"]), "{live:?}");
                assert_ne!(live[0].0, live[1].0);
            } else {
                assert_eq!(answer[0], 0, "{x_fns}/{b_fns} {first:?} {second:?}: {answer:?}");
                assert_one_live(&a, &schema, "k", "X", "refused");
            }
            let slots: Vec<i32> = all_holders(&a, &schema, "k").iter().map(|h| h.0).collect();
            assert_eq!(slots, before, "no slot added while free ones were there ({first:?} {second:?})");
        }
    }
}

/// Held: a retry of a take (same token) waits while its first attempt is
/// still uncommitted: it reuses the token's own row, with a new fence.
#[test]
fn r68_a_retry_waiting_behind_its_own_first_attempt() {
    for (x_fns, b_fns) in PAIRS {
        for kind in [EXCLUSIVE, SHARED, COUNTED2] {
            let schema = Schema::fresh(&url(), "retry");
            schema.install(true, true);
            let a = schema.session("dokebi_lock");
            // Two lapsed rows of other tokens (slots 0 and 1).
            a.take(&["k"], "E", COUNTED, 300);
            a.take(&["k"], "F", COUNTED, 300);
            thread::sleep(Duration::from_millis(400));
            let x = schema.session(x_fns);
            x.exec("BEGIN");
            let first = x.take(&["k", "j"], "A", kind, HOUR);
            assert_eq!(first[0], 1);
            let taker = in_background(schema.session(b_fns), move |b| b.take_full(&["j", "k"], "A", kind, HOUR, 0, 0, HOUR, 10_000));
            x.exec("COMMIT");
            let (_, again) = taker.join().unwrap();
            let again = again.unwrap();
            assert_eq!(again[0], 1);
            assert!(again[1] > first[2] && again[2] > first[1], "new fences {again:?} after {first:?}");
            let live = live_holders(&a, &schema, "k");
            assert_eq!(live.len(), 1, "{live:?}");
            assert_eq!(live[0], (0, "A".to_owned(), Some(again[2])));
            assert_eq!(
                all_holders(&a, &schema, "k").iter().map(|h| h.2.as_str()).collect::<Vec<_>>(),
                vec!["live", "dead"],
                "F's lapsed row marked dead"
            );
            assert_eq!(a.give_back(&["k", "j"], "A", false), Ok(2));
            assert_eq!(a.give_back(&["k", "j"], "A", true), Ok(2));
        }
    }
}

/// Held: a key row made by lock_keys in the taking transaction while
/// another take of the key waits (on the uncommitted insert): the first
/// grant's fence is the clock, the waiting take sees the holder.
#[test]
fn r68_a_key_row_made_in_the_same_transaction() {
    for (x_fns, b_fns) in PAIRS {
        let schema = Schema::fresh(&url(), "fresh");
        schema.install(true, true);
        let x = schema.session(x_fns);
        x.exec("BEGIN");
        assert_eq!(x.lock_keys(&["n"]), vec!["n".to_owned()]);
        assert_eq!(x.fence_counter("n"), Some(0));
        let before = SystemTimeMicros::now();
        let first = x.take(&["n"], "X", EXCLUSIVE, HOUR);
        assert_eq!(first[0], 1);
        assert!(first[1] >= before - 5_000_000, "the fence is the clock's: {first:?}");
        let again = x.take(&["n"], "X", EXCLUSIVE, HOUR);
        assert!(again[1] > first[1]);
        let taker = in_background(schema.session(b_fns), |b| b.take_full(&["n"], "B", EXCLUSIVE, HOUR, 0, 0, HOUR, 10_000));
        x.exec("COMMIT");
        let (_, answer) = taker.join().unwrap();
        assert_eq!(answer.unwrap()[0], 0);
        assert_one_live(&x, &schema, "n", "X", "made in its transaction");
        assert_eq!(live_holders(&x, &schema, "n")[0].2, Some(again[1]));
    }
}

struct SystemTimeMicros;
impl SystemTimeMicros {
    fn now() -> i64 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_micros() as i64
    }
}

/// Held: wake-ups and counts of a release of several keys, some waited
/// for: one notification per key waited for (none for the others), the
/// count of rows freed, and a retry's count the same; through give_back
/// and hand_over, of each build, with a listener of its own.
#[test]
fn r68_a_release_of_several_keys_wakes_the_waited_ones_once() {
    for fns in ["dokebi_lock", "dokebi_lock13"] {
        for by_hand_over in [false, true] {
            let schema = Schema::fresh(&url(), "wake");
            schema.install(true, true);
            let a = schema.session(fns);
            let listener = schema.session("dokebi_lock");
            listener.listen();
            assert_eq!(a.take(&["a", "b", "c", "d"], "A", EXCLUSIVE, HOUR)[0], 1);
            let w = schema.session(fns);
            assert_eq!(w.take_full(&["b"], "W1", EXCLUSIVE, HOUR, HOUR, 0, HOUR, 5_000).unwrap()[0], 0);
            assert_eq!(w.take_full(&["b", "d"], "W2", SHARED, HOUR, HOUR, 0, HOUR, 5_000).unwrap()[0], 0);
            let released = if by_hand_over {
                let reply = a.hand_over(&["a", "b", "c", "d"], "A", &[("N", EXCLUSIVE, HOUR, vec!["c"])], 0, HOUR).unwrap();
                assert_eq!(&reply[..5], &[4, 1, 1, 0, 1], "per released key 1 unless a plain holder has it again (c: N): {reply:?}");
                assert_eq!(reply[5], 1, "N granted c: {reply:?}");
                reply[0] as i32
            } else {
                a.give_back(&["a", "b", "c", "d"], "A", false).unwrap()
            };
            assert_eq!(released, 4);
            assert_eq!(a.give_back(&["a", "b", "c", "d"], "A", true), Ok(if by_hand_over { 3 } else { 4 }), "c's slot went to N");
            let deadline = Instant::now() + Duration::from_secs(3);
            let mut heard: Vec<String> = vec![];
            while Instant::now() < deadline && heard.len() < 2 {
                heard.extend(listener.notes());
                thread::sleep(Duration::from_millis(20));
            }
            thread::sleep(Duration::from_millis(200));
            heard.extend(listener.notes());
            heard.sort();
            assert_eq!(heard, vec!["5:r68nsb".to_owned(), "5:r68nsd".to_owned()], "{fns} hand_over {by_hand_over}");
        }
    }
}

// ---------------------------------------------------------------------
// Crashes and restarts (a private server).
// ---------------------------------------------------------------------

/// Held: on a private server whose WAL writer flushes late (so a release,
/// committed asynchronously, is lost by a crash right after it), rounds
/// of grant, release, crash, restart: every fence granted after a
/// restart is above every fence granted before, the lost release's lease
/// holds the key until it lapses (then its row is marked dead and its
/// retry counts 0), a release flushed by a later grant stays, and a
/// force-release survives the crash.
#[test]
fn r68_fences_and_releases_across_crashes() {
    let mut server = server::PrivateServer::start("r68-crash", &["wal_writer_delay = 10000ms", "synchronous_commit = on"]);
    let url = server.url();
    let schema = Schema::fresh(&url, "crash");
    schema.install(true, false);
    let mut top = 0i64;
    for round in 0..4 {
        let a = schema.session("dokebi_lock");
        // A lease of 2 s: its release comes well within it on a loaded host
        // (one of 500 ms had lapsed before its release in a CI run).
        let f = a.take(&["k"], &format!("A{round}"), EXCLUSIVE, 2_000)[1];
        assert!(f > top, "round {round}: fence {f} after {top}");
        top = f;
        assert_eq!(a.give_back(&["k"], &format!("A{round}"), false), Ok(1));
        // j: released, then flushed by a grant of another key.
        let g = a.take(&["j"], &format!("J{round}"), EXCLUSIVE, HOUR)[1];
        assert!(g > top);
        top = g;
        assert_eq!(a.give_back(&["j"], &format!("J{round}"), false), Ok(1));
        let hk = format!("h{round}");
        let h = a.take(&[hk.as_str()], &format!("H{round}"), EXCLUSIVE, HOUR)[1];
        assert!(h > top);
        top = h;
        // m: held, then broken (durable).
        a.take(&["m"], &format!("M{round}"), EXCLUSIVE, HOUR);
        let broke = a.force_release("m", a.fence_counter("m"), HOUR).unwrap();
        assert_eq!(broke[0], 1);
        top = top.max(broke[1]);
        drop(a);
        server.crash();
        server.start_again();
        let b = schema.session("dokebi_lock");
        // k's release was not flushed: A's lease holds it until it lapses.
        let first = b.take(&["k"], &format!("B{round}"), EXCLUSIVE, 200);
        if first[0] != 1 {
            // Refused: its answer says how long A's lease has left.
            thread::sleep(Duration::from_millis(first[1].max(0) as u64 + 100));
            let again = b.take(&["k"], &format!("B{round}"), EXCLUSIVE, 200);
            assert_eq!(again[0], 1, "round {round}: {again:?}");
            assert!(again[1] > top, "round {round}: fence {} after {top}", again[1]);
            top = again[1];
            assert_eq!(b.give_back(&["k"], &format!("A{round}"), true), Ok(0), "the lost release's retry counts nothing: the lease lapsed");
        } else {
            assert!(first[1] > top, "round {round}: fence {} after {top}", first[1]);
            top = first[1];
        }
        assert_eq!(b.take(&["j"], &format!("K{round}"), EXCLUSIVE, 200)[0], 1, "j's release was flushed by h's grant");
        assert_eq!(b.take(&[hk.as_str()], &format!("K{round}"), EXCLUSIVE, 200)[0], 0, "h's grant was durable");
        assert_eq!(b.renew(&["m"], &format!("M{round}"), HOUR), Ok(0), "the break was durable");
        for key in ["k", "j", hk.as_str(), "m"] {
            top = top.max(b.fence_counter(key).unwrap());
        }
        b.give_back(&["j", "k"], &format!("K{round}"), false).unwrap();
        b.give_back(&["k"], &format!("B{round}"), false).unwrap();
        thread::sleep(Duration::from_millis(250));
    }
}
