//! Where a backend's leases live: three tables and four functions in
//! `schema`, named after `table`, created on first use (`autoCreate`) or by
//! a DBA from [`Table::create_sql`].
//!
//! - `<table>`: one row per key in use, `(namespace, key)`, with its fence
//!   counter. The row is what every statement locks (`FOR UPDATE`, in one
//!   global order) before it reads or changes the key, so each operation
//!   on a key is serialised and a set of keys never deadlocks. It stays
//!   `fenceRetentionMs` after the key's last grant, and is deleted (a few at
//!   a time, by releases) once that passed and nothing holds or waits for
//!   the key.
//! - `<table>_holders`: one row per slot of a key (`slot` 0, 1, ...: as
//!   many as the key had holders at once; a plain key has one), holding its
//!   holder's owner token, kind, weight, limit, expiry on the server's
//!   clock and the fence its grant got (`fence`, written with the token:
//!   NULL in a row an older release granted). A slot whose expiry passed
//!   is free. A grant takes the key's free slot and a release frees it,
//!   both by updating the row in place: only
//!   the primary key is indexed and the tables leave room in their pages
//!   (`fillfactor`), so these are HOT updates, pruned in the page without
//!   VACUUM. Inserting a row per grant and deleting it on release, as
//!   functions 4 did, left a dead row and a dead index entry per pair until
//!   autovacuum came by: `give_back` took 1.0 ms of server time with 15k of
//!   them, 0.27 ms after a VACUUM. Slots go with their key row.
//! - `<table>_waiting`: the marks of requests waiting in any process
//!   (ticket: the server's clock in µs at the first wait), so that no later
//!   request overtakes them (see `take` in [`FUNCTIONS`]). Slots too, as
//!   holder rows: a mark whose `lapses_at` passed is free, and a grant or
//!   a withdrawal frees its request's marks by setting it to `-infinity`.
//!
//! The functions are the operations (see [`super::sql`]): each is called by
//! one statement, so each operation is one round trip and one transaction
//! with no session state. Names are checked by the options (lowercase
//! letters, digits, `_`) and quoted all the same.

/// The tables and functions of one backend, as quoted SQL names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Table {
    schema: String,
    table: String,
}

impl Table {
    pub fn new(schema: &str, table: &str) -> Table {
        Table { schema: schema.to_owned(), table: table.to_owned() }
    }

    /// `"schema"."<table><suffix>"`.
    pub fn name(&self, suffix: &str) -> String {
        format!("{}.{}", quote(&self.schema), quote(&format!("{}{suffix}", self.table)))
    }

    /// `schema.table`, unquoted, for messages (and the NOTIFY channel).
    pub fn display(&self) -> String {
        format!("{}.{}", self.schema, self.table)
    }

    /// The channel releases are announced on: one per table, `schema.table`
    /// when that fits in an identifier (63 bytes: PostgreSQL refuses a
    /// longer channel in NOTIFY and cuts it short in LISTEN), else a digest
    /// of it, which every process computes the same.
    pub fn channel(&self) -> String {
        let name = self.display();
        if name.len() <= MAX_IDENTIFIER_BYTES {
            return name;
        }
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(name.as_bytes());
        format!("dokebi_lock_{}", digest[..16].iter().map(|byte| format!("{byte:02x}")).collect::<String>())
    }

    /// Everything the driver needs, idempotent: what `autoCreate` runs and
    /// what a DBA runs by hand when it is off. The take function's comment
    /// names the version of the functions, so a newer driver replaces
    /// older ones (or asks for it).
    pub fn create_sql(&self) -> String {
        let mut sql = format!("CREATE SCHEMA IF NOT EXISTS {};\n", quote(&self.schema));
        sql += &TABLES
            .replace("{keys}", &self.name(""))
            .replace("{holders}", &self.name("_holders"))
            .replace("{waiting}", &self.name("_waiting"))
            .replace("{fence_index}", &quote(&format!("{}_fence_until", self.table)));
        sql += &self.functions();
        sql += &format!("COMMENT ON FUNCTION {}({TAKE_ARGUMENTS}) IS '{VERSION}';\n", self.name("_take"));
        sql
    }

    fn functions(&self) -> String {
        FUNCTIONS
            .replace("{keys}", &self.name(""))
            .replace("{holders}", &self.name("_holders"))
            .replace("{waiting}", &self.name("_waiting"))
            .replace("{take}", &self.name("_take"))
            .replace("{renew}", &self.name("_renew"))
            .replace("{held_against}", &self.name("_held_against"))
            .replace("{give_back}", &self.name("_give_back"))
            .replace("{withdraw}", &self.name("_withdraw"))
            .replace("{hand_over}", &self.name("_hand_over"))
            .replace("{lock_keys}", &self.name("_lock_keys"))
            .replace("{force_release}", &self.name("_force_release"))
            .replace("{read_committed}", READ_COMMITTED)
            .replace("{durable}", DURABLE)
            .replace("{lock_timeout}", LOCK_TIMEOUT)
            .replace("{take_arguments}", TAKE_ARGUMENTS)
            .replace("{dead}", DEAD)
    }

    /// The statement that answers true when every table and function is
    /// there (with `autoCreate: false`, before the first operation).
    pub fn check_sql(&self) -> String {
        format!("SELECT {}, {}", self.present(), self.newer())
    }

    /// True when the installed functions are of a newer version than this
    /// driver's: they are never replaced by older ones.
    fn newer(&self) -> String {
        format!(
            "coalesce(substring(obj_description(to_regprocedure('{}({TAKE_ARGUMENTS})'), 'pg_proc') from '^dokebi-lock functions ([0-9]+)$')::integer > {}, false)",
            self.name("_take"),
            VERSION.rsplit(' ').next().unwrap_or("0")
        )
    }

    /// [`Self::create_sql`] as a DBA runs it (`autoCreate: false`): one
    /// transaction that first takes the creators' lock (`lock`), so that it
    /// waits for a process installing meanwhile instead of colliding with
    /// its half-done DDL (review R64), and leaves nothing half done itself.
    pub fn script_sql(&self, lock: i64) -> String {
        format!("BEGIN;\n{};\n{}COMMIT;\n", self.creators_lock(lock), self.create_sql())
    }

    /// Takes the creators' lock of this schema: an advisory lock of its
    /// own (its name hashed with `lock`, whose shared form it holds too).
    /// One lock for every schema of the database made an install that
    /// waited (behind a long transaction on its own tables, up to its lock
    /// timeout) hold up every other schema's first operation meanwhile,
    /// past its `commandTimeoutMs`. The shared `lock` is what an older
    /// driver takes alone, exclusively: it still waits for every install
    /// of this version, and they for it, so an upgrade's processes never
    /// run their DDL side by side.
    fn creators_lock(&self, lock: i64) -> String {
        format!("SELECT pg_advisory_xact_lock_shared({lock}), pg_advisory_xact_lock(hashtextextended('{}', {lock}))", self.schema)
    }

    /// [`Self::create_sql`] for a driver that found the tables missing, run
    /// by whoever holds the creators' lock (`lock`, a transaction-scoped
    /// advisory lock): when another process created them meanwhile, it
    /// stops at once with SQLSTATE [`ALREADY_CREATED`] instead of running
    /// the DDL again. Again would not be harmless: `CREATE INDEX IF NOT
    /// EXISTS` takes a `SHARE` lock on the keys table until its
    /// transaction commits, so every grant waited (past `lock_timeout` on
    /// a busy server) while a late creator replaced functions in use.
    pub fn create_once_sql(&self, lock: i64) -> String {
        format!(
            "{};\nDO $created$ BEGIN IF {} THEN RAISE EXCEPTION 'created meanwhile' USING ERRCODE = '{ALREADY_CREATED}'; END IF; \
             IF {} THEN RAISE EXCEPTION 'newer functions installed meanwhile' USING ERRCODE = '{NEWER_INSTALLED}'; END IF; END $created$;\n{}",
            self.creators_lock(lock),
            self.present(),
            self.newer(),
            self.create_sql()
        )
    }

    /// True when every table and function is there, at this version.
    fn present(&self) -> String {
        let procedure = |suffix: &str, arguments: &str| format!("to_regprocedure('{}({arguments})') IS NOT NULL", self.name(suffix));
        let version = format!(
            "coalesce(obj_description(to_regprocedure('{}({TAKE_ARGUMENTS})'), 'pg_proc') = '{VERSION}', false)",
            self.name("_take")
        );
        format!(
            "(to_regclass('{}') IS NOT NULL AND to_regclass('{}') IS NOT NULL AND to_regclass('{}') IS NOT NULL AND {} AND {} AND {} AND {} AND {} AND {} AND {} AND {} AND {version})",
            self.name(""),
            self.name("_holders"),
            self.name("_waiting"),
            procedure("_take", TAKE_ARGUMENTS),
            procedure("_renew", "text, text[], text, bigint, bigint"),
            procedure("_give_back", "text, text[], text, text, boolean, bigint"),
            procedure("_withdraw", "text, text[], text, text, bigint"),
            procedure("_lock_keys", "text, text[]"),
            procedure("_held_against", "text, text[], text, boolean, integer, integer, timestamptz"),
            procedure(
                "_hand_over",
                "text, text, bigint[], bigint, bigint[], bigint, text[], text, text[], boolean[], integer[], integer[], bigint[], integer[], text[]"
            ),
            procedure("_force_release", "text, text, text, bigint, bigint, bigint"),
        )
    }
}

/// The SQLSTATE of [`Table::create_once_sql`] finding functions of a newer
/// driver installed by another process meanwhile.
pub const NEWER_INSTALLED: &str = "DL002";

/// The longest identifier PostgreSQL keeps whole (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// The SQLSTATE of [`Table::create_once_sql`] finding the tables created
/// by another process meanwhile (class `DL`, not one of PostgreSQL's).
pub const ALREADY_CREATED: &str = "DL001";

/// The version of the functions: raise it whenever a function changes, so
/// that existing tables get the new ones (`CREATE OR REPLACE`; a change of
/// a signature or of parameter names needs a `DROP FUNCTION` first). 5: the
/// holders and waiting tables keyed by slot (migrated in [`TABLES`]),
/// `give_back` with `p_retry` (the four-argument one stays for drivers of
/// 4).
/// 6: `renew` locks its key rows, the clean-up checks its candidates again
/// once they are locked and passes held ones over, every function pins its
/// `search_path` and checks the isolation, a session's `synchronous_commit` cannot weaken a grant;
/// `renew`, `give_back` and `withdraw` take `p_lock_timeout_ms` (the older
/// signatures stay, for `hand_over` and older drivers); `hand_over` takes
/// each request's `leaseMs` and `fenceRetentionMs` (`p_lease_ms` and
/// `p_retention_ms` are arrays; the one of 5, with one of each for every
/// request, stays for drivers of 5).
/// 7: `renew` extends no row whose key a live holder of another token
/// holds against it (`held_against`, which `take` asks too).
/// 8: an expired holder row never comes back to life on a clock stepped
/// back: `take` marks the expired rows of other tokens of the keys it
/// grants dead ([`DEAD`]), `renew` the rows it refuses.
/// 11: `give_back`'s clean-up passes over a key with a row of its own
/// token, so that a retry of a release whose answer was lost still counts
/// what the first attempt released (review R27).
/// 12: `force_release`, an operator's break of a stuck lock
/// (`Backend::force_release`).
/// 13: each holder row keeps the fence its grant got (`fence`, added to
/// the holders table of an older install in [`TABLES`]), which `inspect`
/// reads with the time held (issue 53); signatures as 12's.
/// 14: fewer statements per call, signatures and behaviour as 13's (issue
/// 55): a grant raises its fences and writes its holder rows in one
/// statement, a release frees its rows, finds the keys waited for and
/// looks for rows past their retention in one, `lock_keys` sorts no single
/// key, and settings are assigned (`setting := set_config(...)`, evaluated
/// without a query) rather than `PERFORM`ed.
const VERSION: &str = "dokebi-lock functions 14";

/// The server's clock in µs since the epoch, as `take` reads it for a
/// grant's fence (`clock_us`, of `now_ts := clock_timestamp()`): what
/// `inspect` measures a holder's time held with, against its fence.
pub(crate) const CLOCK_US: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint";

/// The expiry of a dead holder row: one whose lease expired (and whose key
/// was granted since, or whose renewal was refused). Below every reading of
/// a clock, however far stepped back, so the row is free for good; above
/// `-infinity`, which only a release writes and a give-back's retry counts,
/// so a lease that expired is never counted as released.
const DEAD: &str = "'epoch'::timestamptz";

/// The argument types of the take function (its signature).
const TAKE_ARGUMENTS: &str = "text, text[], text, boolean, integer, integer, bigint, bigint, bigint, bigint, bigint";

/// `name` as a quoted identifier (a `"` doubled, though the options allow none).
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The tables. `COLLATE "C"` on keys: every statement orders keys the
/// same way, whatever the database's collation.
const TABLES: &str = r#"
CREATE TABLE IF NOT EXISTS {keys} (
  namespace text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  fence bigint NOT NULL,
  fence_until timestamptz NOT NULL,
  PRIMARY KEY (namespace, key)
) WITH (fillfactor = 70);
DO $index$
BEGIN
  -- Named after the table (functions 5 and older named it
  -- dokebi_fence_until, one name per schema, so a second table in the
  -- schema had none): created unless the table has one on fence_until.
  IF NOT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                 WHERE i.indrelid = '{keys}'::regclass AND i.indnatts = 1 AND a.attname = 'fence_until') THEN
    CREATE INDEX {fence_index} ON {keys} (fence_until);
  END IF;
END
$index$;
CREATE TABLE IF NOT EXISTS {holders} (
  namespace text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  slot integer NOT NULL,
  token text NOT NULL,
  shared boolean NOT NULL,
  lim integer NOT NULL,
  weight integer NOT NULL,
  expires_at timestamptz NOT NULL,
  fence bigint,
  PRIMARY KEY (namespace, key, slot)
) WITH (fillfactor = 50);
DO $migrate$
DECLARE
  lock_wait text := current_setting('lock_timeout');
BEGIN
  -- A holders table of functions 4 or older (a row per grant, keyed by
  -- token): its rows get slots, and the key becomes the slot.
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{holders}'::regclass AND attname = 'slot' AND NOT attisdropped) THEN
    ALTER TABLE {holders} ADD COLUMN slot integer;
    UPDATE {holders} h SET slot = n.slot
      FROM (SELECT ctid AS row_id, (row_number() OVER (PARTITION BY namespace, key ORDER BY token) - 1)::integer AS slot FROM {holders}) n
      WHERE h.ctid = n.row_id;
    ALTER TABLE {holders} ALTER COLUMN slot SET NOT NULL;
    EXECUTE format('ALTER TABLE {holders} DROP CONSTRAINT %I',
      (SELECT conname FROM pg_constraint WHERE conrelid = '{holders}'::regclass AND contype = 'p'));
    ALTER TABLE {holders} ADD PRIMARY KEY (namespace, key, slot);
    ALTER TABLE {holders} SET (fillfactor = 50);
    ALTER TABLE {keys} SET (fillfactor = 70);
  END IF;
  -- A holders table of functions 12 or older: each row's grant fence,
  -- NULL in the rows they granted (a nullable column without a default:
  -- a change of the catalog alone, no row rewritten). Looked up first, so
  -- an install that has it takes no lock on the table. Its lock is waited
  -- for 200 ms at most: behind a transaction that holds or has read the
  -- table (a pg_dump, a long report) a waiting ALTER would queue every
  -- process's statements on it until that transaction ends (review R64);
  -- refused, the installation is rolled back (`lockedSetUp`) and tried
  -- again by the next operation. `IF NOT EXISTS`: an older release's
  -- DBA script took no installers' lock, and may run beside an installer that added it.
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{holders}'::regclass AND attname = 'fence' AND NOT attisdropped) THEN
    PERFORM set_config('lock_timeout', '200ms', true);
    ALTER TABLE {holders} ADD COLUMN IF NOT EXISTS fence bigint;
    PERFORM set_config('lock_timeout', lock_wait, true);
  END IF;
END
$migrate$;
CREATE TABLE IF NOT EXISTS {waiting} (
  namespace text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  slot integer NOT NULL,
  token text NOT NULL,
  ticket bigint NOT NULL,
  shared boolean NOT NULL,
  lim integer NOT NULL,
  lapses_at timestamptz NOT NULL,
  PRIMARY KEY (namespace, key, slot)
) WITH (fillfactor = 50);
DO $migrate$
BEGIN
  -- A waiting table of functions 4 or older: as the holders table above.
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '{waiting}'::regclass AND attname = 'slot' AND NOT attisdropped) THEN
    ALTER TABLE {waiting} ADD COLUMN slot integer;
    UPDATE {waiting} w SET slot = n.slot
      FROM (SELECT ctid AS row_id, (row_number() OVER (PARTITION BY namespace, key ORDER BY token) - 1)::integer AS slot FROM {waiting}) n
      WHERE w.ctid = n.row_id;
    ALTER TABLE {waiting} ALTER COLUMN slot SET NOT NULL;
    EXECUTE format('ALTER TABLE {waiting} DROP CONSTRAINT %I',
      (SELECT conname FROM pg_constraint WHERE conrelid = '{waiting}'::regclass AND contype = 'p'));
    ALTER TABLE {waiting} ADD PRIMARY KEY (namespace, key, slot);
    ALTER TABLE {waiting} SET (fillfactor = 50);
  END IF;
END
$migrate$;
"#;

/// What the functions rely on of the transaction they run in, checked at
/// their start: each statement sees what committed before it (READ
/// COMMITTED), so a statement run after a key's row lock was taken sees
/// every change made under it. A session's default isolation cannot be
/// changed inside the transaction (a pooler's other client may have set
/// it): the call is refused, naming the setting.
const READ_COMMITTED: &str = "IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'dokebi-lock: the lock functions run only in READ COMMITTED transactions, not %', current_setting('transaction_isolation')
      USING ERRCODE = '55000', HINT = 'Reset default_transaction_isolation for the role or the sessions the lock driver uses.';
  END IF;";

/// A grant or a renewal commits at least as durably as the server, the
/// database or the role says (`reset_val`), whatever a session `SET` in
/// `synchronous_commit` (a pooler's other client may have turned it off on
/// the server connection the call runs on). Looked up only when the
/// session's is weaker than `on`. And its commit's WARNING reaches the
/// driver whatever `client_min_messages` the session (a pooler's other
/// client, a role, a database) has: a wait for a synchronous standby
/// cancelled at commit answers success with only that WARNING ("committed
/// locally, but might not have been replicated"), which the driver reads
/// as unknown (review R23).
const DURABLE: &str = "IF current_setting('synchronous_commit') IN ('off', 'local') THEN
    PERFORM set_config('synchronous_commit', s.reset_val, true) FROM pg_settings s WHERE s.name = 'synchronous_commit';
  END IF;
  IF current_setting('client_min_messages') NOT IN ('debug5', 'debug4', 'debug3', 'debug2', 'debug1', 'log', 'notice', 'warning') THEN
    PERFORM set_config('client_min_messages', 'warning', true);
  END IF;";

/// Row-lock waits of a renewal, a release or a withdrawal end at
/// `p_lock_timeout_ms` (for the transaction), as a take's: the server then
/// refuses the call (nothing done) before the driver stops waiting for it.
/// NULL (hand_over, older drivers) leaves the caller's. An assignment to
/// the function's `setting`: PL/pgSQL evaluates it as a simple expression,
/// where `PERFORM` runs a query through the executor.
const LOCK_TIMEOUT: &str = "IF p_lock_timeout_ms IS NOT NULL THEN
    setting := set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  END IF;";

/// The operations. Every time is the server's `clock_timestamp()`.
///
/// Plans: every function runs its statements with generic plans
/// (`plan_cache_mode = force_generic_plan`, PostgreSQL 12 and later, for
/// the function's statements only). Under the default `auto` the planner
/// kept planning statements again on most calls: 300 take + give_back
/// pairs in one session of the machine's PostgreSQL 15 took 0.77 ms of
/// server time per pair (1.34 ms with custom plans only), 0.33 ms with
/// generic plans. The statements look rows up by primary key, which a
/// generic plan does as well as a custom one. In the driver's own use a
/// pair is two transactions, about 0.5 ms of server CPU (docs/postgres.md,
/// "Speed").
///
/// Durability: a grant (and a renewal) commits as the server's
/// `synchronous_commit` says, never weaker for a session's `SET` (see [`DURABLE`]: the
/// grant is on disk, or on the synchronous standbys, before the caller
/// hears of it, so a crash loses no lease a caller holds). Everything a crash may lose without
/// harm commits with `synchronous_commit = off` for its transaction only:
/// a release or withdrawal (lost, the key stays held or waited for until
/// its lease or mark lapses) and a refused try (its row locks and marks).
/// A grant that follows an unflushed release flushes it with its own
/// commit (the WAL is one sequence). Fences never rely on durability: a
/// counter a crash lost is overtaken by the clock (`max(counter + 1,
/// clock in µs)`).
///
/// `take`: locks each key's row in sorted order (inserting it when new),
/// and, looking only at live holders and marks (a lapsed one is a free
/// slot), refuses with `{-1, i}` when key `i` (from 1, the caller's order)
/// is held or waited for with another limit; answers `{0, hint, ticket}`
/// when some key is held against the request (a reader by a writer, a
/// writer by anyone, a counted request by more units than its limit
/// leaves) or waited for by an older request
/// of another owner (any mark older than this request's ticket, which is
/// its token's oldest live mark if it has one, so a request never loses
/// its place by passing a newer ticket or none; readers do not wait behind
/// readers' marks), leaving or refreshing this request's
/// mark on those keys for `waiting_ms` when it is not 0; else grants every
/// key: the fence of each is `max(counter + 1, clock in µs)`, written back,
/// and the key row kept `retention_ms`; each key's holder row is this
/// token's, else a free slot, else a new one, written with the token, the
/// kind, the expiry and that fence (so a renewal, which extends the
/// expiry alone, keeps it), and the request's marks are
/// freed; the other tokens' rows of those keys that expired on the clock
/// are marked dead ([`DEAD`]). Answers `{1, fence...}` in the caller's order. A retry of a
/// grant whose answer was lost finds its own token and is granted again,
/// with a new fence. Row locks wait at most
/// `lock_timeout_ms` (`lock_timeout`, for this transaction only).
///
/// `renew`: locks each key's row (as every operation on a key, so a take
/// or a clean-up that found the lease ended cannot overwrite a renewal
/// committing meanwhile), then extends each holder row of the token still
/// live on the clock after the wait whose key is not held against it by
/// a live holder of another token (`take`'s rule for the row's kind:
/// `held_against`); answers how many. So a renewal never makes two
/// holders live that a take would not have granted side by side, whatever
/// the clock did: a row live again on a clock behind the one its lease
/// expired on (stepped back, or a promoted replica's), beside the holder
/// granted the key meanwhile, is not extended. A row refused (held
/// against, or expired) is marked dead ([`DEAD`]): a lease told lost stays
/// lost.
///
/// `held_against`: the keys of `p_keys` held against a request of kind
/// `p_shared`, `p_limit`, `p_weight` by live holders of other tokens at
/// `p_now` (a reader by a writer, a writer by anyone, a counted request by
/// more units than its limit leaves, any by a holder of another limit,
/// which `take` refuses before it asks), each with the time until the
/// first of those holders expires.
///
/// `give_back`: frees the token's live holder rows, keeping the token and
/// setting the expiry to `-infinity`, which nothing else writes there
/// (answers how many; with `p_retry`, a retry of a give-back whose answer
/// was lost, how many rows this token freed, by either attempt), announces
/// each freed key that someone waits for on `channel` (payload: `<bytes of namespace>:<namespace><key>`, empty when
/// too long for NOTIFY: every waiter then retries), and deletes up to four
/// key rows whose retention passed and that nothing holds or waits for
/// (checked again once their rows are locked).
///
/// Every function runs with `search_path = pg_catalog, pg_temp` (a
/// session's own functions or operators never stand in for built-ins; the
/// tables are named with their schema) and in READ COMMITTED only
/// ([`READ_COMMITTED`]).
///
/// `withdraw`: frees the token's live marks, announcing the keys others still
/// wait for (they may have waited behind this one).
///
/// `hand_over`: locks every key of the call (in the one order, so it never
/// deadlocks with a take), gives back a released lease (as `give_back`)
/// and grants this process's next requests in turn (each as `take`, every
/// rule included, on its own `p_lease_ms[r]` and `p_retention_ms[r]`: the
/// requests may be of several backends of the table and namespace), up to
/// the first that is not granted; only the first leaves marks. Answers `{released, wake..., answer...}`: per released
/// key 1 unless a plain holder has it again, then each request's `take`
/// answer. A grant commits as durably as `take`'s.
///
/// `lock_keys`: locks each key's row in sorted order, inserting it when
/// new; answers the sorted keys.
///
/// `force_release`: locks the key's row (inserting it when new), then, as
/// if every lease of the key had ended now, marks each holder row that is
/// neither released nor dead dead ([`DEAD`]: the holder's renewal then
/// finds nothing, and its release, a retry's included, counts nothing; an
/// expired row too, which a clock stepped back would bring back to life),
/// raises the fence as a grant does (`max(counter + 1, clock in µs)`, the
/// key row kept `retention_ms`) and announces the key on `channel` as
/// `give_back` does when it removed a holder and someone waits (the marks
/// stay). Answers `{live holders removed, fence}`, or `{-1, 0}` with
/// nothing changed when the key's fence counter is no longer `p_expected`,
/// what the driver read before (every grant and every break moves it): a
/// call delivered late, by a pooler's queue or a proxy, never removes a
/// holder granted since its read (see `StoreBackend::force_release`,
/// reviews R52 and R53). Whoever holds the
/// key once its row is locked: a read of the holders first, then a break
/// of those, let a grant made between the two outlive the break below its
/// fence (review R51). As durable as a grant: a crash that lost it would
/// bring the holders back.
const FUNCTIONS: &str = r#"
CREATE OR REPLACE FUNCTION {lock_keys}(p_ns text, p_keys text[])
RETURNS text[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  sorted text[];
  k text;
BEGIN
  {read_committed}
  -- One key (most calls) is sorted already: a query fewer.
  IF cardinality(p_keys) = 1 THEN
    sorted := p_keys;
  ELSE
    sorted := ARRAY(SELECT DISTINCT u COLLATE "C" FROM unnest(p_keys) u ORDER BY 1);
  END IF;
  FOREACH k IN ARRAY sorted LOOP
    LOOP
      PERFORM 1 FROM {keys} WHERE namespace = p_ns AND key = k FOR UPDATE;
      EXIT WHEN FOUND;
      INSERT INTO {keys} (namespace, key, fence, fence_until) VALUES (p_ns, k, 0, clock_timestamp()) ON CONFLICT DO NOTHING;
      EXIT WHEN FOUND;
    END LOOP;
  END LOOP;
  RETURN sorted;
END
$fn$;

-- No SET clause, unlike the others: a LANGUAGE sql function without one
-- is inlined into the statement that reads it (no call, planned with it),
-- and runs in its caller's search_path, which the callers pin.
CREATE OR REPLACE FUNCTION {held_against}(p_ns text, p_keys text[], p_token text, p_shared boolean, p_limit integer,
  p_weight integer, p_now timestamptz)
RETURNS TABLE (key text, until bigint) LANGUAGE sql STABLE AS $fn$
  SELECT h.key, (extract(epoch FROM min(h.expires_at) - p_now) * 1000)::bigint
  FROM {holders} h WHERE h.namespace = p_ns AND h.key = ANY (p_keys) AND h.token <> p_token AND h.expires_at > p_now
  GROUP BY h.key
  HAVING bool_or(h.lim <> p_limit)
    OR CASE WHEN p_shared THEN bool_or(NOT h.shared) WHEN p_limit = 1 THEN true ELSE sum(h.weight) + p_weight > p_limit END
$fn$;

-- Dropped first: its last parameter's name is not that of functions 5
-- (`p_lock_timeout_ms`), which `CREATE OR REPLACE` cannot change. That is on
-- purpose: a driver of 5, which has no check for newer functions, fails
-- its install (one transaction) against these instead of putting back its
-- renew, which does not lock the key rows, beside our takes.
DROP FUNCTION IF EXISTS {take}({take_arguments});
CREATE FUNCTION {take}(p_ns text, p_keys text[], p_token text, p_shared boolean, p_limit integer,
  p_weight integer, p_lease_ms bigint, p_waiting_ms bigint, p_ticket bigint, p_retention_ms bigint, p_lock_wait_ms bigint)
RETURNS bigint[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  now_ts timestamptz := clock_timestamp();
  clock_us bigint := floor(extract(epoch FROM now_ts) * 1000000)::bigint;
  -- The key row is kept retention_ms after the grant, rounded up to the
  -- next eighth of retention_ms (see raised).
  bucket_us bigint := greatest(p_retention_ms * 125, 1);
  retain_until timestamptz := 'epoch'::timestamptz
    + ((clock_us + p_retention_ms * 1000) / bucket_us + 1) * bucket_us * interval '1 microsecond';
  sorted text[];
  at integer;
  blocked text[];
  hint bigint;
  place bigint;
  others bigint;
  own bigint;
  fences bigint[];
  fenced text[];
  placed integer;
  setting text;
BEGIN
  setting := set_config('lock_timeout', p_lock_wait_ms || 'ms', true);
  sorted := {lock_keys}(p_ns, p_keys);
  -- The clock once the key rows are locked: a take that waited for them
  -- (behind another grant's commit) must not grant at the time it began,
  -- below a fence granted, and its row cleaned up, meanwhile.
  now_ts := clock_timestamp();
  clock_us := floor(extract(epoch FROM now_ts) * 1000000)::bigint;
  retain_until := 'epoch'::timestamptz + ((clock_us + p_retention_ms * 1000) / bucket_us + 1) * bucket_us * interval '1 microsecond';
  -- A key nobody holds and nobody else waits for (the usual case, and a
  -- waiter's try after the release it was woken by) is granted without the
  -- checks below: one look at both tables instead of five statements.
  SELECT count(*) FILTER (WHERE NOT o.mine), count(*) FILTER (WHERE o.mine) INTO others, own FROM (
    (SELECT false AS mine FROM {holders} WHERE namespace = p_ns AND key = ANY (sorted) AND expires_at > now_ts LIMIT 1)
    UNION ALL SELECT w.token = p_token FROM {waiting} w WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.lapses_at > now_ts
  ) o;
  IF others > 0 THEN
    -- A request that waited keeps its place, whatever ticket it passes: its
    -- token's oldest live mark.
    SELECT coalesce(least(nullif(p_ticket, 0), min(w.ticket)), 0) INTO place FROM {waiting} w
      WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.token = p_token AND w.lapses_at > now_ts;
    SELECT min(array_position(p_keys, o.key::text)) INTO at FROM (
      SELECT h.key FROM {holders} h WHERE h.namespace = p_ns AND h.key = ANY (sorted) AND h.token <> p_token AND h.lim <> p_limit
        AND h.expires_at > now_ts
      UNION ALL
      SELECT w.key FROM {waiting} w WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.token <> p_token AND w.lim <> p_limit
        AND w.lapses_at > now_ts
    ) o;
    IF at IS NOT NULL THEN
      setting := set_config('synchronous_commit', 'off', true);
      RETURN ARRAY[-1, at];
    END IF;
    SELECT array_agg(b.key), min(b.until) INTO blocked, hint FROM (
      SELECT a.key, a.until FROM {held_against}(p_ns, sorted, p_token, p_shared, p_limit, p_weight, now_ts) a
      UNION
      -- A key this token holds already (a grant whose answer was lost:
      -- a hand-over's, or a take a proxy delivered late) waits for no
      -- mark: taking it again adds no holder (the token's row is reused),
      -- and refusing it would leave that untold grant holding off the
      -- very waiters that hold it off (review R13).
      SELECT w.key, NULL FROM {waiting} w
      WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.token <> p_token AND w.lapses_at > now_ts
        AND (place = 0 OR (w.ticket, w.token) < (place, p_token)) AND NOT (p_shared AND w.shared)
        AND NOT EXISTS (SELECT 1 FROM {holders} h
                        WHERE h.namespace = p_ns AND h.key = w.key AND h.token = p_token AND h.expires_at > now_ts)
    ) b;
    IF blocked IS NOT NULL THEN
      IF p_waiting_ms > 0 THEN
        IF place = 0 THEN
          place := clock_us;
        END IF;
        -- Marks, as holder rows, are slots updated in place: this token's
        -- live mark is refreshed, else a lapsed one (or one given up) is
        -- taken, else a slot added. A key may be blocked by holders and marks both.
        blocked := ARRAY(SELECT DISTINCT b FROM unnest(blocked) b);
        UPDATE {waiting} w SET ticket = least(w.ticket, place), lapses_at = greatest(w.lapses_at, now_ts + p_waiting_ms * interval '1 millisecond')
          WHERE w.namespace = p_ns AND w.key = ANY (blocked) AND w.token = p_token AND w.lapses_at > now_ts;
        GET DIAGNOSTICS placed = ROW_COUNT;
        IF placed < cardinality(blocked) THEN
          WITH pick AS (
            SELECT b AS key, (SELECT w.slot FROM {waiting} w WHERE w.namespace = p_ns AND w.key = b AND w.lapses_at <= now_ts
                              ORDER BY w.slot LIMIT 1) AS slot
            FROM unnest(blocked) b
            WHERE NOT EXISTS (SELECT 1 FROM {waiting} w WHERE w.namespace = p_ns AND w.key = b AND w.token = p_token AND w.lapses_at > now_ts)
          )
          UPDATE {waiting} w SET token = p_token, ticket = place, shared = p_shared, lim = p_limit,
            lapses_at = now_ts + p_waiting_ms * interval '1 millisecond'
            FROM pick WHERE w.namespace = p_ns AND w.key = pick.key AND w.slot = pick.slot;
          INSERT INTO {waiting} (namespace, key, slot, token, ticket, shared, lim, lapses_at)
            SELECT p_ns, b, coalesce((SELECT max(w.slot) + 1 FROM {waiting} w WHERE w.namespace = p_ns AND w.key = b), 0), p_token, place,
              p_shared, p_limit, now_ts + p_waiting_ms * interval '1 millisecond'
            FROM unnest(blocked) b
            WHERE NOT EXISTS (SELECT 1 FROM {waiting} w WHERE w.namespace = p_ns AND w.key = b AND w.token = p_token AND w.lapses_at > now_ts);
        END IF;
      END IF;
      setting := set_config('synchronous_commit', 'off', true);
      RETURN ARRAY[0, coalesce(hint, -1), place];
    END IF;
  ELSE
    place := 0;
  END IF;
  {durable}
  -- One statement raises the fences and writes the holder rows (each
  -- statement a function runs costs its executor's start, about as much as
  -- its work here). No other operation changes these keys' holder rows
  -- meanwhile: each locks the key rows first, as this call did.
  -- fence_until only moves forward, a retention bucket at a time: a grant
  -- that leaves it as it was changes no indexed column, so the update is a
  -- HOT one (no new index entries, the old version pruned in place).
  -- Each key's holder row: this token's (a retry whose answer was lost),
  -- else a free slot (released or lapsed), else a new slot (below). Holder
  -- rows are updated in place, never deleted by a release: nothing of them
  -- is indexed but the slot, so the updates are HOT ones (the old version
  -- pruned in its page, no VACUUM needed, no index entry added).
  -- The other tokens' rows expired on this clock are marked dead (an
  -- expiry no clock reading is behind, {dead}) in the same statement: a
  -- clock stepped back later must not bring one back to life beside this
  -- grant, held against it (and the holder granted after it). Free slots
  -- still; a released row keeps -infinity, what a give-back's retry counts.
  -- Every row given this token gets, in the same statement, the key's
  -- fence this call answers (a retry's row too: its new fence), so no
  -- row keeps another grant's fence beside its token.
  WITH raised AS (
    UPDATE {keys} r SET fence = greatest(r.fence + 1, clock_us), fence_until = greatest(r.fence_until, retain_until)
    WHERE r.namespace = p_ns AND r.key = ANY (sorted)
    RETURNING r.key, r.fence
  ), pick AS (
    SELECT raised.key, raised.fence,
      (SELECT h.slot FROM {holders} h WHERE h.namespace = p_ns AND h.key = raised.key AND (h.token = p_token OR h.expires_at <= now_ts)
       ORDER BY h.token = p_token DESC, h.slot LIMIT 1) AS slot
    FROM raised
  ), dead AS (
    UPDATE {holders} h SET expires_at = {dead}
      FROM pick WHERE h.namespace = p_ns AND h.key = pick.key AND h.slot IS DISTINCT FROM pick.slot AND h.token <> p_token
        AND h.expires_at > {dead} AND h.expires_at <= now_ts
  ), granted AS (
    UPDATE {holders} h SET token = p_token, shared = p_shared, lim = p_limit, weight = p_weight,
      expires_at = now_ts + p_lease_ms * interval '1 millisecond', fence = pick.fence
      FROM pick WHERE h.namespace = p_ns AND h.key = pick.key AND h.slot = pick.slot AND (h.token = p_token OR h.expires_at <= now_ts)
      RETURNING h.key
  ) SELECT array_agg(pick.fence ORDER BY array_position(p_keys, pick.key::text)),
      array_agg(pick.key::text ORDER BY array_position(p_keys, pick.key::text)), (SELECT count(*) FROM granted)
    INTO fences, fenced, placed FROM pick;
  IF placed < cardinality(sorted) THEN
    INSERT INTO {holders} (namespace, key, slot, token, shared, lim, weight, expires_at, fence)
      SELECT p_ns, k, coalesce((SELECT max(h.slot) + 1 FROM {holders} h WHERE h.namespace = p_ns AND h.key = k), 0), p_token, p_shared,
        p_limit, p_weight, now_ts + p_lease_ms * interval '1 millisecond', fences[array_position(fenced, k)]
      FROM unnest(sorted) k
      WHERE NOT EXISTS (SELECT 1 FROM {holders} h WHERE h.namespace = p_ns AND h.key = k AND h.token = p_token);
  END IF;
  IF place <> 0 OR own > 0 THEN
    UPDATE {waiting} SET lapses_at = '-infinity' WHERE namespace = p_ns AND key = ANY (sorted) AND token = p_token AND lapses_at > now_ts;
  END IF;
  RETURN ARRAY[1] || fences;
END
$fn$;

CREATE OR REPLACE FUNCTION {renew}(p_ns text, p_keys text[], p_token text, p_lease_ms bigint, p_lock_timeout_ms bigint)
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  now_ts timestamptz;
  renewed integer;
  kept text[];
  setting text;
BEGIN
  {read_committed}
  {durable}
  {lock_timeout}
  -- The key rows first, as every operation on a key: a take or a clean-up
  -- that found the lease ended then either committed before (the token is
  -- gone: nothing renewed) or waits for this commit and sees the renewal.
  -- The expiry is checked on the clock after the wait.
  PERFORM 1 FROM {keys} WHERE namespace = p_ns AND key = ANY (p_keys) ORDER BY key FOR UPDATE;
  now_ts := clock_timestamp();
  -- A row live on the clock is not proof that the lease is: the clock may
  -- be behind the one that let the lease expire (stepped back, or a
  -- promoted replica's), and the key granted meanwhile to a holder this
  -- one may not be beside. Such a row is not extended: the lease is lost.
  WITH extended AS (
    UPDATE {holders} h SET expires_at = now_ts + p_lease_ms * interval '1 millisecond'
      WHERE h.namespace = p_ns AND h.key = ANY (p_keys) AND h.token = p_token AND h.expires_at > now_ts
        AND NOT EXISTS (SELECT FROM {held_against}(p_ns, ARRAY[h.key::text], p_token, h.shared, h.lim, h.weight, now_ts))
      RETURNING h.key
  ) SELECT count(*), array_agg(extended.key) INTO renewed, kept FROM extended;
  -- A row refused (held against, or expired) is marked dead, as a grant
  -- marks the expired rows it finds: a lease told lost stays lost, whatever
  -- the clock or the holders do next. A released row keeps -infinity.
  IF renewed < cardinality(p_keys) THEN
    UPDATE {holders} h SET expires_at = {dead}
      WHERE h.namespace = p_ns AND h.key = ANY (p_keys) AND h.token = p_token AND h.expires_at > {dead}
        AND NOT h.key = ANY (coalesce(kept, '{}'));
  END IF;
  RETURN renewed;
END
$fn$;

CREATE OR REPLACE FUNCTION {give_back}(p_ns text, p_keys text[], p_token text, p_channel text, p_retry boolean,
  p_lock_timeout_ms bigint)
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  now_ts timestamptz := clock_timestamp();
  released integer;
  freed text[];
  old_ns text[];
  old_keys text[];
  cleaned integer;
  setting text;
  woken text[];
  stale boolean;
BEGIN
  {read_committed}
  {lock_timeout}
  setting := set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM {keys} WHERE namespace = p_ns AND key = ANY (p_keys) ORDER BY key FOR UPDATE;
  -- A released row stays, free, with its token and the expiry -infinity,
  -- which only a release writes: a retry of a release whose answer was
  -- lost (p_retry) counts what the first attempt released too.
  -- One statement releases, finds the keys someone waits for and looks
  -- for a key row whose retention has passed (the clean-up's four
  -- statements run only then): marks are written under the key rows'
  -- locks, which this call holds, so its snapshot has every one of them.
  WITH gone AS (
    UPDATE {holders} SET expires_at = '-infinity'
    WHERE namespace = p_ns AND key = ANY (p_keys) AND token = p_token AND expires_at > now_ts RETURNING key
  ) SELECT (SELECT count(*) FROM gone),
      (SELECT array_agg(DISTINCT w.key) FROM {waiting} w
       WHERE w.namespace = p_ns AND w.key IN (SELECT gone.key FROM gone) AND w.lapses_at > now_ts),
      EXISTS (SELECT 1 FROM {keys} WHERE fence_until < now_ts)
    INTO released, woken, stale;
  IF p_retry THEN
    SELECT count(*) INTO released FROM {holders}
      WHERE namespace = p_ns AND key = ANY (p_keys) AND token = p_token AND expires_at = '-infinity';
  END IF;
  IF woken IS NOT NULL THEN
    PERFORM pg_notify(p_channel, CASE WHEN octet_length(p_ns) + octet_length(k) < 7900
                                      THEN octet_length(p_ns) || ':' || p_ns || k ELSE '' END) FROM unnest(woken) k;
  END IF;
  IF NOT stale THEN
    RETURN released;
  END IF;
  -- Candidates: rows past their retention that look idle (a key held or
  -- waited for past its retention is passed over, or four of them would stop
  -- every other row from going), locked unless another operation has them.
  -- Not a key with a row of p_token: the rows this call released are what
  -- its retry counts (a later call cleans them up).
  SELECT array_agg(c.namespace), array_agg(c.key) INTO old_ns, old_keys FROM (
    SELECT r.namespace, r.key FROM {keys} r WHERE r.fence_until < now_ts
      AND NOT EXISTS (SELECT 1 FROM {holders} h WHERE h.namespace = r.namespace AND h.key = r.key
                        AND (h.expires_at > now_ts OR h.token = p_token))
      AND NOT EXISTS (SELECT 1 FROM {waiting} w WHERE w.namespace = r.namespace AND w.key = r.key AND w.lapses_at > now_ts)
    ORDER BY r.fence_until LIMIT 4 FOR UPDATE OF r SKIP LOCKED
  ) c;
  IF old_keys IS NULL THEN
    RETURN released;
  END IF;
  -- Checked again in a statement of its own, whose snapshot is taken with
  -- the rows locked: it sees every renewal, grant and mark of these keys
  -- (each is made under the key's row lock), which the statement above may
  -- have read from before one committed.
  WITH old AS (
    SELECT * FROM unnest(old_ns, old_keys) AS o(namespace, key)
  ), idle AS (
    DELETE FROM {keys} r USING old WHERE r.namespace = old.namespace AND r.key = old.key
      AND NOT EXISTS (SELECT 1 FROM {holders} h WHERE h.namespace = r.namespace AND h.key = r.key AND h.expires_at > now_ts)
      AND NOT EXISTS (SELECT 1 FROM {waiting} w WHERE w.namespace = r.namespace AND w.key = r.key AND w.lapses_at > now_ts)
    RETURNING r.namespace, r.key
  ), holders_gone AS (
    DELETE FROM {holders} h USING idle WHERE h.namespace = idle.namespace AND h.key = idle.key
  ), waiting_gone AS (
    DELETE FROM {waiting} w USING idle WHERE w.namespace = idle.namespace AND w.key = idle.key
  ) SELECT count(*) INTO cleaned FROM idle;
  RETURN released;
END
$fn$;

-- What hand_over and drivers of functions 4 and 5 call: the lock timeout
-- is left as the caller set it.
CREATE OR REPLACE FUNCTION {give_back}(p_ns text, p_keys text[], p_token text, p_channel text, p_retry boolean)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$
  SELECT {give_back}(p_ns, p_keys, p_token, p_channel, p_retry, NULL) $fn$;
CREATE OR REPLACE FUNCTION {give_back}(p_ns text, p_keys text[], p_token text, p_channel text)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$ SELECT {give_back}(p_ns, p_keys, p_token, p_channel, false, NULL) $fn$;
CREATE OR REPLACE FUNCTION {renew}(p_ns text, p_keys text[], p_token text, p_lease_ms bigint)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$ SELECT {renew}(p_ns, p_keys, p_token, p_lease_ms, NULL) $fn$;

CREATE OR REPLACE FUNCTION {withdraw}(p_ns text, p_keys text[], p_token text, p_channel text, p_lock_timeout_ms bigint)
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  now_ts timestamptz := clock_timestamp();
  withdrawn text[];
  setting text;
BEGIN
  {read_committed}
  {lock_timeout}
  setting := set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM {keys} WHERE namespace = p_ns AND key = ANY (p_keys) ORDER BY key FOR UPDATE;
  WITH gone AS (
    UPDATE {waiting} SET lapses_at = '-infinity' WHERE namespace = p_ns AND key = ANY (p_keys) AND token = p_token AND lapses_at > now_ts
    RETURNING key
  ) SELECT array_agg(key) INTO withdrawn FROM gone;
  PERFORM pg_notify(p_channel, CASE WHEN octet_length(p_ns) + octet_length(w.key) < 7900
                                    THEN octet_length(p_ns) || ':' || p_ns || w.key ELSE '' END)
    FROM (SELECT DISTINCT key FROM {waiting} WHERE namespace = p_ns AND key = ANY (withdrawn) AND lapses_at > now_ts) w;
  RETURN coalesce(cardinality(withdrawn), 0);
END
$fn$;

CREATE OR REPLACE FUNCTION {withdraw}(p_ns text, p_keys text[], p_token text, p_channel text)
RETURNS integer LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $fn$ SELECT {withdraw}(p_ns, p_keys, p_token, p_channel, NULL) $fn$;

CREATE OR REPLACE FUNCTION {hand_over}(p_ns text, p_channel text, p_lease_ms bigint[], p_waiting_ms bigint, p_retention_ms bigint[],
  p_lock_timeout_ms bigint, p_released_keys text[], p_released_token text, p_tokens text[], p_shared boolean[], p_limits integer[],
  p_weights integer[], p_tickets bigint[], p_counts integer[], p_keys text[])
RETURNS bigint[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  durability text := CASE WHEN current_setting('synchronous_commit') IN ('off', 'local')
    THEN (SELECT s.reset_val FROM pg_settings s WHERE s.name = 'synchronous_commit') ELSE current_setting('synchronous_commit') END;
  released integer := 0;
  reply bigint[];
  answers bigint[] := '{}';
  answer bigint[];
  granted boolean := false;
  at integer := 1;
  r integer;
  setting text;
BEGIN
  setting := set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  PERFORM {lock_keys}(p_ns, p_released_keys || p_keys);
  IF cardinality(p_released_keys) > 0 THEN
    released := {give_back}(p_ns, p_released_keys, p_released_token, p_channel, false);
  END IF;
  FOR r IN 1 .. coalesce(cardinality(p_tokens), 0) LOOP
    answer := {take}(p_ns, p_keys[at : at + p_counts[r] - 1], p_tokens[r], p_shared[r], p_limits[r], p_weights[r], p_lease_ms[r],
      CASE WHEN r = 1 THEN p_waiting_ms ELSE 0 END, p_tickets[r], p_retention_ms[r], p_lock_timeout_ms);
    answers := answers || answer;
    EXIT WHEN answer[1] <> 1;
    granted := true;
    at := at + p_counts[r];
  END LOOP;
  IF granted THEN
    setting := set_config('synchronous_commit', durability, true);
  END IF;
  reply := ARRAY[released::bigint];
  reply := reply || ARRAY(
    SELECT CASE WHEN EXISTS (SELECT 1 FROM {holders} h WHERE h.namespace = p_ns AND h.key = u.key AND NOT h.shared AND h.lim = 1
                                AND h.expires_at > clock_timestamp()) THEN 0 ELSE 1 END
    FROM unnest(p_released_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.ord);
  RETURN reply || answers;
END
$fn$;

CREATE OR REPLACE FUNCTION {force_release}(p_ns text, p_key text, p_channel text, p_retention_ms bigint, p_expected bigint,
  p_lock_timeout_ms bigint)
RETURNS bigint[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
  now_ts timestamptz;
  clock_us bigint;
  bucket_us bigint := greatest(p_retention_ms * 125, 1);
  retain_until timestamptz;
  removed bigint;
  raised bigint;
  setting text;
BEGIN
  {read_committed}
  {durable}
  {lock_timeout}
  PERFORM {lock_keys}(p_ns, ARRAY[p_key]);
  -- The clock once the key row is locked, as take's: a grant that
  -- committed while this call waited for the row is seen by each statement
  -- below (READ COMMITTED), and its fence is below the one raised here.
  now_ts := clock_timestamp();
  clock_us := floor(extract(epoch FROM now_ts) * 1000000)::bigint;
  -- The counter moved since the driver read it (NULL: no row then, which
  -- lock_keys made with 0): a grant or a break came in between.
  IF (SELECT fence FROM {keys} WHERE namespace = p_ns AND key = p_key) <> coalesce(p_expected, 0) THEN
    RETURN ARRAY[-1, 0];
  END IF;
  retain_until := 'epoch'::timestamptz + ((clock_us + p_retention_ms * 1000) / bucket_us + 1) * bucket_us * interval '1 microsecond';
  SELECT count(*) INTO removed FROM {holders} WHERE namespace = p_ns AND key = p_key AND expires_at > now_ts;
  -- Dead, not released (-infinity, which a give-back's retry counts): a
  -- removed holder's release, retried or not, counts nothing. Expired rows
  -- too, as a grant marks them: no clock stepped back brings one back.
  UPDATE {holders} SET expires_at = {dead} WHERE namespace = p_ns AND key = p_key AND expires_at > {dead};
  UPDATE {keys} r SET fence = greatest(r.fence + 1, clock_us), fence_until = greatest(r.fence_until, retain_until)
    WHERE r.namespace = p_ns AND r.key = p_key RETURNING r.fence INTO raised;
  PERFORM pg_notify(p_channel, CASE WHEN octet_length(p_ns) + octet_length(p_key) < 7900
                                    THEN octet_length(p_ns) || ':' || p_ns || p_key ELSE '' END)
    WHERE removed > 0 AND EXISTS (SELECT 1 FROM {waiting} WHERE namespace = p_ns AND key = p_key AND lapses_at > now_ts);
  RETURN ARRAY[removed, raised];
END
$fn$;
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// `inspect` measures the time held with the clock a grant's fence
    /// comes from: `take`'s `clock_us`, of `now_ts := clock_timestamp()`.
    #[test]
    fn inspect_s_clock_is_take_s() {
        let of_now = CLOCK_US.replace("clock_timestamp()", "now_ts");
        assert_eq!(FUNCTIONS.matches(&format!("clock_us := {of_now};")).count(), 2, "take's and force_release's");
        assert!(FUNCTIONS.contains(&format!("clock_us bigint := {of_now};")));
        assert!(FUNCTIONS.contains("fence = greatest(r.fence + 1, clock_us)"));
    }
}
