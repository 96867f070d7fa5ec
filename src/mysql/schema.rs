//! Where a backend's leases live: three InnoDB tables and the stored
//! procedures that are the operations, named after `table` in the URL's
//! database, created on first use (`autoCreate`) or by a DBA from
//! [`Table::create_sql`].
//!
//! The tables are those of the postgres driver (see
//! `src/postgres/schema.rs`), with every time a `BIGINT` of microseconds on
//! the server's clock (`UTC_TIMESTAMP(6)`, read again after the row locks
//! are taken) and names as `VARBINARY(255)`, compared byte by byte:
//!
//! - `<table>`: one row per key in use, `(ns, k)`, with its fence counter:
//!   what every procedure locks first (`INSERT … ON DUPLICATE KEY UPDATE`,
//!   an exclusive row lock, in the byte order of the names), so each
//!   operation on a key is serialised and opposite orders never deadlock.
//!   Kept `fenceRetentionMs` after the key's last grant, deleted (four at a
//!   time, by releases) once that passed and nothing holds or waits.
//! - `<table>_holders`: one row per slot of a key: owner token, kind,
//!   weight, limit, expiry, and the fence its grant got (`fence`, written
//!   with the token; NULL in a row an older release granted). A slot
//!   whose expiry passed is free; a release sets it to 0, which nothing
//!   else writes (so a retry of a release whose answer was lost can count
//!   what the first attempt freed).
//! - `<table>_waiting`: the marks of requests waiting in any process
//!   (ticket: the server's clock in µs at the first wait), so that no later
//!   request overtakes them.
//! - `<table>_released`: a log of the keys a release (or a withdrawn mark)
//!   freed while someone waited for them, read by each process's poller
//!   (see [`super::notify`]); one release in 32 deletes up to 64 entries
//!   older than a minute.
//!
//! Each public procedure is one transaction in READ COMMITTED (`SET
//! TRANSACTION` before its own `START TRANSACTION`: for that transaction
//! only, so no gap locks between neighbouring keys), called by one `CALL`
//! (one round trip), rolled back whole on any error. Row-lock waits are
//! bounded by `p_lock_wait_s` (`innodb_lock_wait_timeout`, set for the call
//! and put back before it returns, on every path), so a call stalled
//! behind another's row lock is refused (1205, nothing done) before the
//! driver stops waiting for it. The procedures leave nothing in the
//! session: no user variables, no temporary tables, no open statement.
//!
//! Lists travel as text of hex digits (see [`super::sql`]): `p_keys` is the
//! request's key names, hex, comma-separated, sorted; hand-overs pass
//! several requests as groups separated by `;`. Every list is `LONGTEXT
//! CHARACTER SET ascii`, whatever the database's default character set (in
//! utf16, utf32 or ucs2 a digit takes two bytes or more: `UNHEX` of the
//! list would be NULL and `LENGTH` would count bytes, not characters).

/// The tables and procedures of one backend, as quoted SQL names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Table {
    table: String,
}

/// The version of the procedures: raise it whenever one changes, so that
/// existing installations get the new ones (each older one is dropped and
/// created again). Kept as every procedure's `COMMENT`.
/// 7: an expired holder row never comes back to life on a clock stepped
/// back: a grant marks the expired rows of other tokens of its keys dead
/// ([`DEAD`]), a renewal the rows it refuses.
/// 9: a release's clean-up passes over a key with a row of its own token,
/// so that a retry of a release whose answer was lost still counts what
/// the first attempt released (review R27).
/// 10: `_force_release`, an operator's break of a stuck lock
/// (`Backend::force_release`).
/// 11: each holder row keeps the fence its grant got (`fence`, added to
/// the holders table of an older install in [`TABLES`]), which `inspect`
/// reads with the time held (issue 53); parameters as 10's.
const VERSION: &str = "dokebi-lock procedures 11";

/// The expiry (µs of the server's clock, `BIGINT`) of a dead holder row:
/// one whose lease expired (and whose key was granted since, or whose
/// renewal was refused). Below every reading of a clock, however far
/// stepped back, so the row is free for good; not 0, which only a release
/// writes and a release's retry counts, so a lease that expired is never
/// counted as released.
const DEAD: &str = "1";

/// The `sql_mode` the procedures are created in (a procedure keeps its
/// creator's, whatever the caller's): strict, so a value too long for its
/// variable is an error, never cut; and none of the modes that change what
/// the bodies mean (MariaDB's `EMPTY_STRING_IS_NULL` makes their `''`
/// NULL, `ANSI_QUOTES`, `PIPES_AS_CONCAT`, …). Set on the installer's own
/// connection only (see [`super::transport::connection::Installer`]).
pub(crate) const SQL_MODE: &str = "STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION";

/// What [`Table::check_sql`] appends to the comment of a procedure created
/// in another `sql_mode`: not current, replaced like an older one.
const OTHER_MODE: &str = " in another sql_mode";

impl Table {
    pub fn new(table: &str) -> Table {
        Table { table: table.to_owned() }
    }

    /// `` `<table><suffix>` ``, in the connection's database.
    pub fn name(&self, suffix: &str) -> String {
        quote(&format!("{}{suffix}", self.table))
    }

    /// The table's name, unquoted, for messages.
    pub fn display(&self) -> &str {
        &self.table
    }

    /// The tables' statements, each sent on its own: idempotent.
    pub fn tables(&self) -> Vec<String> {
        TABLES.split(";\n").map(|sql| self.fill(sql)).filter(|sql| !sql.trim().is_empty()).collect()
    }

    /// Each procedure's name (unquoted) and its `CREATE PROCEDURE`, which
    /// carries the version as its `COMMENT`.
    pub fn procedures(&self) -> Vec<(String, String)> {
        PROCEDURES
            .iter()
            .map(|(suffix, body)| {
                let body = body.replacen("MODIFIES SQL DATA", &format!("MODIFIES SQL DATA COMMENT '{VERSION}'"), 1);
                (format!("{}{suffix}", self.table), self.fill(&body))
            })
            .collect()
    }

    /// Everything, as one idempotent script for the `mysql` client: what a
    /// DBA runs by hand when `autoCreate` is off.
    pub fn create_sql(&self) -> String {
        // The procedures keep this session's sql_mode (see `SQL_MODE`).
        let mut script = format!("DELIMITER $$\nSET SESSION sql_mode = '{SQL_MODE}'$$\n");
        for statement in self.tables() {
            script += statement.trim();
            script += "$$\n";
        }
        for (name, create) in self.procedures() {
            script += &format!("DROP PROCEDURE IF EXISTS {}$$\n{}$$\n", quote(&name), create.trim());
        }
        script + "DELIMITER ;\n"
    }

    /// The query that answers the installed procedures of the table, as
    /// `name=comment` joined by `|` (NULL: none) and how many of the four
    /// tables exist.
    pub fn check_sql(&self) -> String {
        let names: Vec<String> = self.procedures().into_iter().map(|(name, _)| format!("'{name}'")).collect();
        format!(
            "SELECT (SELECT GROUP_CONCAT(CONCAT(ROUTINE_NAME, '=', {}) SEPARATOR '|') FROM information_schema.ROUTINES \
             WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME IN ({})), \
             (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('{}', '{}', '{}', '{}'))",
            comment(),
            names.join(", "),
            self.table,
            format_args!("{}_holders", self.table),
            format_args!("{}_waiting", self.table),
            format_args!("{}_released", self.table),
        )
    }

    /// The query that answers one procedure's version (its `COMMENT`, see
    /// [`version`]).
    pub fn version_sql(&self, name: &str) -> String {
        format!(
            "SELECT {} FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_TYPE = 'PROCEDURE' AND ROUTINE_NAME = '{name}'",
            comment()
        )
    }

    fn fill(&self, sql: &str) -> String {
        let mut sql = sql
            .replace("{keys}", &self.name(""))
            .replace("{holders}", &self.name("_holders"))
            .replace("{holders_name}", &format!("{}_holders", self.table))
            .replace("{waiting}", &self.name("_waiting"))
            .replace("{released}", &self.name("_released"))
            .replace("{clock}", CLOCK)
            .replace("{dead}", DEAD)
            .replace("{enter}", ENTER)
            .replace("{counted}", COUNTED)
            .replace("{lock_counted}", LOCK_COUNTED)
            .replace("{leave}", LEAVE);
        for (suffix, _) in PROCEDURES {
            sql = sql.replace(&format!("{{{}}}", &suffix[1..]), &self.name(suffix));
        }
        sql
    }
}

/// What the installed version says of this driver's.
pub(crate) enum Installed {
    /// This driver's procedures and every table.
    Current,
    /// Missing (or older) procedures, or a missing table.
    Missing,
    /// A newer driver's procedures: neither replaced nor called.
    Newer,
}

/// A procedure's comment as the checks read it: [`OTHER_MODE`] appended
/// when it was created in another `sql_mode` than [`SQL_MODE`]. No `''`
/// in it: the checks run in the server's `sql_mode`, where `''` may be NULL.
fn comment() -> String {
    format!("IF(SQL_MODE = '{SQL_MODE}', ROUTINE_COMMENT, CONCAT(ROUTINE_COMMENT, '{OTHER_MODE}'))")
}

/// A procedure's version, from its comment as the checks read it, and
/// whether it was created in [`SQL_MODE`].
pub(crate) fn version(comment: &str) -> (Option<u32>, bool) {
    let (comment, in_our_mode) = comment.strip_suffix(OTHER_MODE).map_or((comment, true), |comment| (comment, false));
    (comment.strip_prefix("dokebi-lock procedures ").and_then(|n| n.parse::<u32>().ok()), in_our_mode)
}

/// This driver's version of the procedures.
pub(crate) fn ours() -> u32 {
    version(VERSION).0.unwrap_or(0)
}

/// Reads [`Table::check_sql`]'s answer: current when every procedure is
/// of this driver's version, created in [`SQL_MODE`], and every table is
/// there.
pub(crate) fn installed(listing: Option<&str>, procedures: usize, tables: i64) -> Installed {
    let versions: Vec<(Option<u32>, bool)> = listing
        .unwrap_or("")
        .split('|')
        .filter(|entry| !entry.is_empty())
        .map(|entry| entry.split_once('=').map_or((None, true), |(_, c)| version(c)))
        .collect();
    if versions.iter().any(|(theirs, _)| theirs.is_some_and(|theirs| theirs > ours())) {
        Installed::Newer
    } else if versions.len() == procedures && versions.iter().all(|theirs| *theirs == (Some(ours()), true)) && tables == 4 {
        Installed::Current
    } else {
        Installed::Missing
    }
}

/// `name` as a quoted identifier (the options allow no backquote in it).
fn quote(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// The server's clock in µs since the epoch, at the statement that reads it.
pub(crate) const CLOCK: &str = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

/// The start of every public procedure: a READ COMMITTED transaction whose
/// row-lock waits end at `p_lock_wait_s`, rolled back (and the session's
/// timeout put back) on any error, which is then raised again. Its end,
/// either way, starts no next transaction and keeps the connection, whatever
/// the server's `completion_type` (`CHAIN` would leave one open, which the
/// next call's `SET TRANSACTION` refuses; `RELEASE` would close it).
const ENTER: &str = "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK AND NO CHAIN NO RELEASE; SET innodb_lock_wait_timeout = v_old_wait; RESIGNAL; END;
  SET innodb_lock_wait_timeout = p_lock_wait_s;
  SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
  START TRANSACTION;";

/// The end of every public procedure, before its answer.
const LEAVE: &str = "COMMIT AND NO CHAIN NO RELEASE;
  SET innodb_lock_wait_timeout = v_old_wait;";

/// The tables, statements separated by `;\n`.
///
/// A holders table of procedures 10 or older gets its `fence` column
/// (NULL in the rows they granted), by a statement prepared from what
/// `information_schema` says: MariaDB has `ADD COLUMN IF NOT EXISTS`,
/// MySQL 8 has not, and an install that has the column runs no `ALTER`
/// at all (which would need the `ALTER` privilege, and the table's
/// metadata lock, every time). Two installers upgrading at once may both
/// find it missing: the second `EXECUTE` fails with 1060 (a duplicate
/// column), which the driver passes over (see `MysqlStore::install`). The
/// `ALTER` waits a second at most for the table's metadata lock: behind a
/// transaction that holds or has read the table (a dump, a long report) a
/// waiting `ALTER` would queue every process's statements on it until that
/// transaction ends (review R64); refused (1205), the installation stops
/// and the next operation tries again. The user variable and the wait
/// live on the installer's own connection (closed after the installation);
/// the script of `autoCreate: false` sets both back.
const TABLES: &str = "CREATE TABLE IF NOT EXISTS {keys} (
  ns VARBINARY(255) NOT NULL,
  k VARBINARY(255) NOT NULL,
  fence BIGINT NOT NULL,
  fence_until BIGINT NOT NULL,
  PRIMARY KEY (ns, k),
  KEY fence_until (fence_until)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {holders} (
  ns VARBINARY(255) NOT NULL,
  k VARBINARY(255) NOT NULL,
  slot INT NOT NULL,
  token VARBINARY(64) NOT NULL,
  shared TINYINT NOT NULL,
  lim INT NOT NULL,
  weight INT NOT NULL,
  expires_at BIGINT NOT NULL,
  fence BIGINT NULL,
  PRIMARY KEY (ns, k, slot)
) ENGINE = InnoDB;
SET @dokebi_lock_migration = (SELECT IF(COUNT(*) = 0, 'ALTER TABLE {holders} ADD COLUMN fence BIGINT NULL', 'DO 0')
  FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{holders_name}' AND COLUMN_NAME = 'fence');
PREPARE dokebi_lock_migration FROM @dokebi_lock_migration;
SET SESSION lock_wait_timeout = 1;
EXECUTE dokebi_lock_migration;
SET SESSION lock_wait_timeout = DEFAULT;
DEALLOCATE PREPARE dokebi_lock_migration;
SET @dokebi_lock_migration = NULL;
CREATE TABLE IF NOT EXISTS {waiting} (
  ns VARBINARY(255) NOT NULL,
  k VARBINARY(255) NOT NULL,
  slot INT NOT NULL,
  token VARBINARY(64) NOT NULL,
  ticket BIGINT NOT NULL,
  shared TINYINT NOT NULL,
  lim INT NOT NULL,
  lapses_at BIGINT NOT NULL,
  PRIMARY KEY (ns, k, slot)
) ENGINE = InnoDB;
CREATE TABLE IF NOT EXISTS {released} (
  id BIGINT NOT NULL AUTO_INCREMENT,
  ns VARBINARY(255) NOT NULL,
  k VARBINARY(255) NOT NULL,
  at_us BIGINT NOT NULL,
  PRIMARY KEY (id),
  KEY at_us (at_us)
) ENGINE = InnoDB;
";

/// How many items a comma-separated list `p_keys` has.
macro_rules! count {
    ($list:literal) => {
        concat!("CASE WHEN ", $list, " = '' THEN 0 ELSE LENGTH(", $list, ") - LENGTH(REPLACE(", $list, ", ',', '')) + 1 END")
    };
}

/// The `i`-th (from 1) hex item of list `p_keys`, as bytes.
macro_rules! item {
    ($list:literal, $at:literal) => {
        concat!("UNHEX(SUBSTRING_INDEX(SUBSTRING_INDEX(", $list, ", ',', ", $at, "), ',', -1))")
    };
}

/// The `i`-th (from 1) number of a comma-separated list.
macro_rules! number {
    ($list:literal, $at:literal) => {
        concat!("CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(", $list, ", ',', ", $at, "), ',', -1) AS SIGNED)")
    };
}

/// Refuses a call whose list `p_keys` has not `p_count` keys: a list cut
/// on its way (a server that cuts a too long argument instead of refusing
/// it) is rolled back, never granted in part.
macro_rules! counted {
    ($list:literal) => {
        concat!(
            "IF NOT (",
            count!($list),
            " <=> p_count) THEN\n    SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'dokebi-lock: a key list arrived cut short';\n  END IF;"
        )
    };
}

const COUNTED: &str = counted!("p_keys");
const LOCK_COUNTED: &str = counted!("p_lock_keys");

/// The procedures, by suffix. `_lock`, `_held_against`, `_try` and
/// `_release` are parts of the others (no transaction of their own);
/// `_take`, `_renew`, `_give_back`, `_withdraw`, `_hand_over` and
/// `_force_release` are the operations.
///
/// `_held_against` is the postgres driver's `held_against` for one key:
/// the earliest expiry of the key's live holders of other tokens when
/// they are held against a request of the kind given (a reader by a
/// writer, a writer by anyone, a counted request by more units than its
/// limit leaves, any by a holder of another limit), else NULL. `_try`
/// asks it before a grant, `_renew` before it extends a row, of the
/// row's kind: a renewal never makes two holders live that a take would
/// not have granted side by side, whatever the clock did. A row `_renew`
/// refuses (held against, or expired) is marked dead ([`DEAD`]).
///
/// `_try` is the postgres driver's `take` rule for rule: it refuses with
/// `-1,i` when key `i` is held or waited for with another limit; answers
/// `0,hint,ticket` when a key is held against the request (a reader by a
/// writer, a writer by anyone, a counted request by more units than its
/// limit leaves) or waited for by an older request of another owner
/// (readers do not wait behind readers' marks), leaving or refreshing the
/// request's marks for `p_waiting_ms` when it is not 0; else grants every
/// key, each fence `max(counter + 1, clock in µs)`, the key row kept
/// `p_retention_ms` (rounded up to an eighth of it), the holder row this
/// token's, else a free slot, else a new one, written with the token, the
/// kind, the expiry and that fence (a renewal extends the expiry alone;
/// the other tokens' rows expired on the clock are marked dead,
/// [`DEAD`]), and frees the request's marks: `1,fence...` in the order of
/// `p_keys`.
///
/// `_force_release` is the postgres driver's `force_release`: it locks the
/// key's row `p_key` (one stored name, hex), then, as if every lease of the
/// key had ended now, marks each holder row neither released nor dead dead
/// ([`DEAD`]: the holder's renewal then finds nothing, and its release, a
/// retry's included, counts nothing; an expired row too), raises the fence
/// as `_try` does (the key row kept `p_retention_ms`) and logs the key in
/// `<table>_released` when it removed a holder and someone waits, as a
/// release does (the marks stay). Answers `removed,fence`: the live holders
/// removed, the fence; `-1,0`, nothing changed, when the key's fence
/// counter is no longer `p_expected`, what the driver read before (every
/// grant and every break moves it: a call delivered late never removes a
/// holder granted since its read, reviews R52 and R53). Whoever holds the
/// key once its row is locked: a read
/// of the holders first let a grant made before the break outlive it below
/// its fence (review R51).
const PROCEDURES: &[(&str, &str)] = &[
    (
        "_lock",
        concat!(
            "CREATE PROCEDURE {lock}(IN p_ns VARBINARY(255), IN p_keys LONGTEXT CHARACTER SET ascii) MODIFIES SQL DATA
BEGIN
  DECLARE v_n INT DEFAULT ",
            count!("p_keys"),
            ";
  DECLARE v_i INT DEFAULT 1;
  WHILE v_i <= v_n DO
    INSERT INTO {keys} (ns, k, fence, fence_until) VALUES (p_ns, ",
            item!("p_keys", "v_i"),
            ", 0, 0)
      ON DUPLICATE KEY UPDATE fence = fence;
    SET v_i = v_i + 1;
  END WHILE;
END"
        ),
    ),
    (
        "_held_against",
        "CREATE PROCEDURE {held_against}(IN p_ns VARBINARY(255), IN p_k VARBINARY(255), IN p_token VARBINARY(64), IN p_shared TINYINT, IN p_limit INT,
  IN p_weight INT, IN p_now BIGINT, OUT p_until BIGINT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_count BIGINT;
  DECLARE v_sum BIGINT;
  DECLARE v_writer INT;
  DECLARE v_other INT;
  SELECT COUNT(*), MIN(expires_at), COALESCE(SUM(weight), 0), COALESCE(MAX(shared = 0), 0), COALESCE(MAX(lim <> p_limit), 0)
    INTO v_count, p_until, v_sum, v_writer, v_other
    FROM {holders} WHERE ns = p_ns AND k = p_k AND token <> p_token AND expires_at > p_now;
  IF NOT (v_count > 0 AND (v_other OR CASE WHEN p_shared THEN v_writer = 1 WHEN p_limit = 1 THEN TRUE ELSE v_sum + p_weight > p_limit END)) THEN
    SET p_until = NULL;
  END IF;
END",
    ),
    (
        "_try",
        concat!(
            "CREATE PROCEDURE {try}(IN p_ns VARBINARY(255), IN p_keys LONGTEXT CHARACTER SET ascii, IN p_token VARBINARY(64), IN p_shared TINYINT, IN p_limit INT,
  IN p_weight INT, IN p_lease_ms BIGINT, IN p_waiting_ms BIGINT, IN p_ticket BIGINT, IN p_retention_ms BIGINT, OUT p_answer LONGTEXT CHARACTER SET ascii)
  MODIFIES SQL DATA
try: BEGIN
  DECLARE v_n INT DEFAULT ",
            count!("p_keys"),
            ";
  DECLARE v_i INT DEFAULT 1;
  DECLARE v_k VARBINARY(255);
  DECLARE v_now BIGINT DEFAULT {clock};
  DECLARE v_bucket BIGINT DEFAULT GREATEST(p_retention_ms * 125, 1);
  DECLARE v_place BIGINT DEFAULT 0;
  DECLARE v_hint BIGINT DEFAULT NULL;
  DECLARE v_blocked LONGTEXT CHARACTER SET ascii DEFAULT '';
  DECLARE v_x BIGINT;
  DECLARE v_slot INT;
  DECLARE v_expired INT;
  DECLARE v_fence BIGINT;
  DECLARE v_fences LONGTEXT CHARACTER SET ascii DEFAULT '';
  -- Another limit on any key: refused.
  WHILE v_i <= v_n DO
    SET v_k = ",
            item!("p_keys", "v_i"),
            ";
    IF EXISTS (SELECT 1 FROM {holders} WHERE ns = p_ns AND k = v_k AND token <> p_token AND lim <> p_limit AND expires_at > v_now)
       OR EXISTS (SELECT 1 FROM {waiting} WHERE ns = p_ns AND k = v_k AND token <> p_token AND lim <> p_limit AND lapses_at > v_now) THEN
      SET p_answer = CONCAT('-1,', v_i);
      LEAVE try;
    END IF;
    -- A request that waited keeps its place, whatever ticket it passes:
    -- its token's oldest live mark.
    SET v_x = (SELECT MIN(ticket) FROM {waiting} WHERE ns = p_ns AND k = v_k AND token = p_token AND lapses_at > v_now);
    IF v_x IS NOT NULL AND (v_place = 0 OR v_x < v_place) THEN
      SET v_place = v_x;
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  IF p_ticket > 0 AND (v_place = 0 OR p_ticket < v_place) THEN
    SET v_place = p_ticket;
  END IF;
  -- The keys held against the request, or waited for by an older request.
  SET v_i = 1;
  WHILE v_i <= v_n DO
    SET v_k = ",
            item!("p_keys", "v_i"),
            ";
    CALL {held_against}(p_ns, v_k, p_token, p_shared, p_limit, p_weight, v_now, v_x);
    IF v_x IS NOT NULL THEN
      SET v_blocked = CONCAT(v_blocked, ',', v_i);
      SET v_hint = LEAST(COALESCE(v_hint, v_x - v_now), v_x - v_now);
    -- A key this token holds already (a grant whose answer was lost: a
    -- hand-over's, or a take a proxy delivered late) waits for no mark:
    -- taking it again adds no holder (the token's row is reused), and
    -- refusing it would leave that untold grant holding off the very
    -- waiters that hold it off (review R13).
    ELSEIF EXISTS (SELECT 1 FROM {waiting} WHERE ns = p_ns AND k = v_k AND token <> p_token AND lapses_at > v_now
                   AND (v_place = 0 OR ticket < v_place OR (ticket = v_place AND token < p_token)) AND NOT (p_shared AND shared))
           AND NOT EXISTS (SELECT 1 FROM {holders} WHERE ns = p_ns AND k = v_k AND token = p_token AND expires_at > v_now) THEN
      SET v_blocked = CONCAT(v_blocked, ',', v_i);
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  IF v_blocked <> '' THEN
    IF p_waiting_ms > 0 THEN
      IF v_place = 0 THEN
        SET v_place = v_now;
      END IF;
      -- This token's live mark is refreshed, else a lapsed slot taken,
      -- else a slot added.
      SET v_blocked = SUBSTRING(v_blocked, 2);
      SET v_n = ",
            count!("v_blocked"),
            ";
      SET v_i = 1;
      WHILE v_i <= v_n DO
        SET v_k = UNHEX(SUBSTRING_INDEX(SUBSTRING_INDEX(p_keys, ',', ",
            number!("v_blocked", "v_i"),
            "), ',', -1));
        UPDATE {waiting} SET ticket = LEAST(ticket, v_place), lapses_at = GREATEST(lapses_at, v_now + p_waiting_ms * 1000)
          WHERE ns = p_ns AND k = v_k AND token = p_token AND lapses_at > v_now;
        IF ROW_COUNT() = 0 THEN
          SET v_slot = (SELECT MIN(slot) FROM {waiting} WHERE ns = p_ns AND k = v_k AND lapses_at <= v_now);
          IF v_slot IS NULL THEN
            INSERT INTO {waiting} (ns, k, slot, token, ticket, shared, lim, lapses_at)
              SELECT p_ns, v_k, COALESCE(MAX(slot) + 1, 0), p_token, v_place, p_shared, p_limit, v_now + p_waiting_ms * 1000
              FROM {waiting} WHERE ns = p_ns AND k = v_k;
          ELSE
            UPDATE {waiting} SET token = p_token, ticket = v_place, shared = p_shared, lim = p_limit, lapses_at = v_now + p_waiting_ms * 1000
              WHERE ns = p_ns AND k = v_k AND slot = v_slot;
          END IF;
        END IF;
        SET v_i = v_i + 1;
      END WHILE;
    END IF;
    SET p_answer = CONCAT('0,', COALESCE(ROUND(v_hint / 1000), -1), ',', v_place);
    LEAVE try;
  END IF;
  -- Granted: each key's fence, holder row and marks.
  SET v_i = 1;
  WHILE v_i <= v_n DO
    SET v_k = ",
            item!("p_keys", "v_i"),
            ";
    SET v_fence = (SELECT GREATEST(fence + 1, v_now) FROM {keys} WHERE ns = p_ns AND k = v_k);
    UPDATE {keys} SET fence = v_fence,
      fence_until = GREATEST(fence_until, ((v_now + p_retention_ms * 1000) DIV v_bucket + 1) * v_bucket)
      WHERE ns = p_ns AND k = v_k;
    SET v_fences = CONCAT(v_fences, ',', v_fence);
    -- The slot: this token's row, else the first free one (released or
    -- expired); and how many rows of other tokens expired on this clock.
    SELECT COALESCE(MIN(IF(token = p_token, slot, NULL)), MIN(IF(expires_at <= v_now, slot, NULL))),
        COALESCE(SUM(token <> p_token AND expires_at > {dead} AND expires_at <= v_now), 0)
      INTO v_slot, v_expired FROM {holders} WHERE ns = p_ns AND k = v_k;
    -- Those are marked dead (an expiry no clock reading is behind, {dead}):
    -- a clock stepped back later must not bring one back to life beside
    -- this grant. Free slots still; a released row keeps 0, what a
    -- release's retry counts. Only when there are some: a released row
    -- is the usual free slot.
    IF v_expired > 0 THEN
      UPDATE {holders} SET expires_at = {dead}
        WHERE ns = p_ns AND k = v_k AND slot <> v_slot AND token <> p_token AND expires_at > {dead} AND expires_at <= v_now;
    END IF;
    -- The row gets, in the statement that writes its token, the fence this
    -- call answers for the key (a retry's own row too: its new fence), so
    -- no row keeps another grant's fence beside its token.
    IF v_slot IS NULL THEN
      INSERT INTO {holders} (ns, k, slot, token, shared, lim, weight, expires_at, fence)
        SELECT p_ns, v_k, COALESCE(MAX(slot) + 1, 0), p_token, p_shared, p_limit, p_weight, v_now + p_lease_ms * 1000, v_fence
        FROM {holders} WHERE ns = p_ns AND k = v_k;
    ELSE
      UPDATE {holders} SET token = p_token, shared = p_shared, lim = p_limit, weight = p_weight, expires_at = v_now + p_lease_ms * 1000,
          fence = v_fence
        WHERE ns = p_ns AND k = v_k AND slot = v_slot;
    END IF;
    UPDATE {waiting} SET lapses_at = 0 WHERE ns = p_ns AND k = v_k AND token = p_token AND lapses_at > v_now;
    SET v_i = v_i + 1;
  END WHILE;
  SET p_answer = CONCAT('1', v_fences);
END"
        ),
    ),
    (
        "_release",
        concat!(
            "CREATE PROCEDURE {release}(IN p_ns VARBINARY(255), IN p_keys LONGTEXT CHARACTER SET ascii, IN p_token VARBINARY(64), IN p_retry TINYINT, IN p_clean TINYINT, OUT p_released INT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_n INT DEFAULT ",
            count!("p_keys"),
            ";
  DECLARE v_i INT DEFAULT 1;
  DECLARE v_k VARBINARY(255);
  DECLARE v_now BIGINT DEFAULT {clock};
  DECLARE v_done INT DEFAULT 0;
  DECLARE v_c INT;
  DECLARE v_ns VARBINARY(255);
  -- Not a key with a row of p_token: the rows this call released are what
  -- its retry counts (a later call cleans them up).
  DECLARE v_old CURSOR FOR SELECT r.ns, r.k FROM {keys} r WHERE r.fence_until < v_now
      AND NOT EXISTS (SELECT 1 FROM {holders} h WHERE h.ns = r.ns AND h.k = r.k AND (h.expires_at > v_now OR h.token = p_token))
      AND NOT EXISTS (SELECT 1 FROM {waiting} w WHERE w.ns = r.ns AND w.k = r.k AND w.lapses_at > v_now)
    ORDER BY r.fence_until LIMIT 4 FOR UPDATE SKIP LOCKED;
  DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;
  SET p_released = 0;
  -- A released row keeps its token, its expiry 0, which only a release
  -- writes: a retry counts what the first attempt released too.
  WHILE v_i <= v_n DO
    SET v_k = ",
            item!("p_keys", "v_i"),
            ";
    UPDATE {holders} SET expires_at = 0 WHERE ns = p_ns AND k = v_k AND token = p_token AND expires_at > v_now;
    SET v_c = ROW_COUNT();
    IF p_retry THEN
      SET v_c = (SELECT COUNT(*) FROM {holders} WHERE ns = p_ns AND k = v_k AND token = p_token AND expires_at = 0);
    END IF;
    SET p_released = p_released + v_c;
    IF v_c > 0 AND EXISTS (SELECT 1 FROM {waiting} WHERE ns = p_ns AND k = v_k AND lapses_at > v_now) THEN
      INSERT INTO {released} (ns, k, at_us) VALUES (p_ns, v_k, v_now);
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  -- One release in 32 trims the log, so releases seldom wait for each
  -- other's deletes of the same old entries.
  IF RAND() < 0.03125 THEN
    DELETE FROM {released} WHERE at_us < v_now - 60000000 LIMIT 64;
  END IF;
  -- Up to four key rows past their retention that nothing holds or waits
  -- for, locked unless another call has them, checked again once locked.
  -- Not in a hand-over (p_clean 0): its own locked rows are not skipped, and
  -- it would delete the rows of the keys it grants next (a new row's
  -- fence_until is 0), whose answers then read no fence.
  -- Looked for with a plain read (SELECT … INTO): in a procedure, IF
  -- EXISTS (SELECT …) is a locking read that waits for every such row
  -- another call has locked (two releases deadlocked on each other's rows,
  -- 1213; one behind a take in flight waited out the lock wait, 1205).
  SET v_c = 0;
  IF p_clean THEN
    SELECT EXISTS (SELECT 1 FROM {keys} WHERE fence_until < v_now) INTO v_c;
  END IF;
  IF v_c THEN
    OPEN v_old;
    clean: LOOP
      FETCH v_old INTO v_ns, v_k;
      IF v_done THEN
        LEAVE clean;
      END IF;
      IF NOT EXISTS (SELECT 1 FROM {holders} WHERE ns = v_ns AND k = v_k AND expires_at > v_now)
         AND NOT EXISTS (SELECT 1 FROM {waiting} WHERE ns = v_ns AND k = v_k AND lapses_at > v_now) THEN
        DELETE FROM {holders} WHERE ns = v_ns AND k = v_k;
        DELETE FROM {waiting} WHERE ns = v_ns AND k = v_k;
        DELETE FROM {keys} WHERE ns = v_ns AND k = v_k;
      END IF;
    END LOOP;
    CLOSE v_old;
  END IF;
END"
        ),
    ),
    (
        "_take",
        "CREATE PROCEDURE {take}(IN p_ns VARBINARY(255), IN p_keys LONGTEXT CHARACTER SET ascii, IN p_token VARBINARY(64), IN p_shared TINYINT, IN p_limit INT,
  IN p_weight INT, IN p_lease_ms BIGINT, IN p_waiting_ms BIGINT, IN p_ticket BIGINT, IN p_retention_ms BIGINT, IN p_count INT, IN p_lock_wait_s INT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_old_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE v_answer LONGTEXT CHARACTER SET ascii;
  {enter}
  {counted}
  CALL {lock}(p_ns, p_keys);
  CALL {try}(p_ns, p_keys, p_token, p_shared, p_limit, p_weight, p_lease_ms, p_waiting_ms, p_ticket, p_retention_ms, v_answer);
  {leave}
  SELECT v_answer;
END",
    ),
    (
        "_renew",
        concat!(
            "CREATE PROCEDURE {renew}(IN p_ns VARBINARY(255), IN p_keys LONGTEXT CHARACTER SET ascii, IN p_token VARBINARY(64), IN p_lease_ms BIGINT, IN p_lock_wait_s INT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_old_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE v_n INT DEFAULT ",
            count!("p_keys"),
            ";
  DECLARE v_i INT DEFAULT 1;
  DECLARE v_now BIGINT;
  DECLARE v_renewed INT DEFAULT 0;
  DECLARE v_k VARBINARY(255);
  DECLARE v_slot INT;
  DECLARE v_shared TINYINT;
  DECLARE v_limit INT;
  DECLARE v_weight INT;
  DECLARE v_until BIGINT;
  {enter}
  -- The key rows first, as every operation on a key; the expiry is checked
  -- on the clock after the wait.
  CALL {lock}(p_ns, p_keys);
  SET v_now = {clock};
  WHILE v_i <= v_n DO
    SET v_k = ",
            item!("p_keys", "v_i"),
            ";
    -- The token's live row (one at most: MIN only makes the answer one
    -- row, NULL when there is none).
    SELECT MIN(slot), MIN(shared), MIN(lim), MIN(weight) INTO v_slot, v_shared, v_limit, v_weight
      FROM {holders} WHERE ns = p_ns AND k = v_k AND token = p_token AND expires_at > v_now;
    -- A row live on the clock is not proof that the lease is: the clock
    -- may be behind the one that let the lease expire (stepped back, or a
    -- promoted replica's), and the key granted meanwhile to a holder this
    -- one may not be beside. Such a row is not extended: the lease is lost.
    IF v_slot IS NOT NULL THEN
      CALL {held_against}(p_ns, v_k, p_token, v_shared, v_limit, v_weight, v_now, v_until);
    END IF;
    IF v_slot IS NOT NULL AND v_until IS NULL THEN
      UPDATE {holders} SET expires_at = v_now + p_lease_ms * 1000 WHERE ns = p_ns AND k = v_k AND slot = v_slot;
      SET v_renewed = v_renewed + 1;
    ELSE
      -- Refused (held against, or expired): the row is marked dead, as a
      -- grant marks the expired rows it finds, so a lease told lost stays
      -- lost whatever the clock or the holders do next. A released row
      -- keeps 0.
      UPDATE {holders} SET expires_at = {dead} WHERE ns = p_ns AND k = v_k AND token = p_token AND expires_at > {dead};
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  {leave}
  SELECT v_renewed;
END"
        ),
    ),
    (
        "_give_back",
        "CREATE PROCEDURE {give_back}(IN p_ns VARBINARY(255), IN p_keys LONGTEXT CHARACTER SET ascii, IN p_token VARBINARY(64), IN p_retry TINYINT, IN p_lock_wait_s INT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_old_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE v_released INT;
  {enter}
  CALL {lock}(p_ns, p_keys);
  CALL {release}(p_ns, p_keys, p_token, p_retry, 1, v_released);
  {leave}
  SELECT v_released;
END",
    ),
    (
        "_withdraw",
        concat!(
            "CREATE PROCEDURE {withdraw}(IN p_ns VARBINARY(255), IN p_keys LONGTEXT CHARACTER SET ascii, IN p_token VARBINARY(64), IN p_lock_wait_s INT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_old_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE v_n INT DEFAULT ",
            count!("p_keys"),
            ";
  DECLARE v_i INT DEFAULT 1;
  DECLARE v_now BIGINT;
  DECLARE v_withdrawn INT DEFAULT 0;
  DECLARE v_k VARBINARY(255);
  {enter}
  CALL {lock}(p_ns, p_keys);
  SET v_now = {clock};
  WHILE v_i <= v_n DO
    SET v_k = ",
            item!("p_keys", "v_i"),
            ";
    UPDATE {waiting} SET lapses_at = 0 WHERE ns = p_ns AND k = v_k AND token = p_token AND lapses_at > v_now;
    -- Others waiting behind this one may go now.
    IF ROW_COUNT() > 0 THEN
      SET v_withdrawn = v_withdrawn + 1;
      IF EXISTS (SELECT 1 FROM {waiting} WHERE ns = p_ns AND k = v_k AND lapses_at > v_now) THEN
        INSERT INTO {released} (ns, k, at_us) VALUES (p_ns, v_k, v_now);
      END IF;
    END IF;
    SET v_i = v_i + 1;
  END WHILE;
  {leave}
  SELECT v_withdrawn;
END"
        ),
    ),
    (
        "_hand_over",
        concat!(
            "CREATE PROCEDURE {hand_over}(IN p_ns VARBINARY(255), IN p_lock_keys LONGTEXT CHARACTER SET ascii, IN p_released_keys LONGTEXT CHARACTER SET ascii, IN p_released_token VARBINARY(64),
  IN p_tokens LONGTEXT CHARACTER SET ascii, IN p_shared LONGTEXT CHARACTER SET ascii, IN p_limits LONGTEXT CHARACTER SET ascii, IN p_weights LONGTEXT CHARACTER SET ascii, IN p_tickets LONGTEXT CHARACTER SET ascii, IN p_lease_ms LONGTEXT CHARACTER SET ascii, IN p_retention_ms LONGTEXT CHARACTER SET ascii,
  IN p_keys LONGTEXT CHARACTER SET ascii, IN p_count INT, IN p_waiting_ms BIGINT, IN p_lock_wait_s INT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_old_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE v_released INT DEFAULT 0;
  DECLARE v_n INT DEFAULT ",
            count!("COALESCE(p_tokens, '')"),
            ";
  DECLARE v_r INT DEFAULT 1;
  DECLARE v_i INT DEFAULT 1;
  DECLARE v_answer LONGTEXT CHARACTER SET ascii;
  DECLARE v_answers LONGTEXT CHARACTER SET ascii DEFAULT '';
  DECLARE v_wakes LONGTEXT CHARACTER SET ascii DEFAULT '';
  DECLARE v_now BIGINT;
  {enter}
  {lock_counted}
  -- A caller whose sql_mode is EMPTY_STRING_IS_NULL passes an empty list
  -- (no release, no request) as NULL.
  SET p_released_keys = COALESCE(p_released_keys, '');
  -- Every key of the call, in the one order, so it never deadlocks with a take.
  CALL {lock}(p_ns, p_lock_keys);
  IF p_released_keys <> '' THEN
    CALL {release}(p_ns, p_released_keys, p_released_token, 0, 0, v_released);
  END IF;
  hand: WHILE v_r <= v_n DO
    CALL {try}(p_ns, SUBSTRING_INDEX(SUBSTRING_INDEX(p_keys, ';', v_r), ';', -1),
      SUBSTRING_INDEX(SUBSTRING_INDEX(p_tokens, ',', v_r), ',', -1), ",
            number!("p_shared", "v_r"),
            ", ",
            number!("p_limits", "v_r"),
            ", ",
            number!("p_weights", "v_r"),
            ", ",
            number!("p_lease_ms", "v_r"),
            ", IF(v_r = 1, p_waiting_ms, 0), ",
            number!("p_tickets", "v_r"),
            ", ",
            number!("p_retention_ms", "v_r"),
            ", v_answer);
    SET v_answers = CONCAT(v_answers, ',', v_answer);
    IF SUBSTRING_INDEX(v_answer, ',', 1) <> '1' THEN
      LEAVE hand;
    END IF;
    SET v_r = v_r + 1;
  END WHILE;
  -- Per released key: 1 unless a plain holder has it again.
  SET v_now = {clock};
  SET v_n = ",
            count!("p_released_keys"),
            ";
  WHILE v_i <= v_n DO
    SET v_wakes = CONCAT(v_wakes, ',', IF(EXISTS (SELECT 1 FROM {holders} WHERE ns = p_ns AND k = ",
            item!("p_released_keys", "v_i"),
            " AND shared = 0 AND lim = 1 AND expires_at > v_now), 0, 1));
    SET v_i = v_i + 1;
  END WHILE;
  {leave}
  SELECT CONCAT(v_released, v_wakes, v_answers);
END"
        ),
    ),
    (
        "_force_release",
        "CREATE PROCEDURE {force_release}(IN p_ns VARBINARY(255), IN p_key LONGTEXT CHARACTER SET ascii, IN p_retention_ms BIGINT, IN p_expected BIGINT,
  IN p_lock_wait_s INT)
  MODIFIES SQL DATA
BEGIN
  DECLARE v_old_wait BIGINT DEFAULT @@SESSION.innodb_lock_wait_timeout;
  DECLARE v_k VARBINARY(255) DEFAULT UNHEX(p_key);
  DECLARE v_bucket BIGINT DEFAULT GREATEST(p_retention_ms * 125, 1);
  DECLARE v_now BIGINT;
  DECLARE v_removed INT;
  DECLARE v_fence BIGINT;
  {enter}
  CALL {lock}(p_ns, p_key);
  -- The clock once the key row is locked: a grant that committed while
  -- this call waited for the row is seen by each statement below (READ
  -- COMMITTED), and its fence is below the one raised here.
  SET v_now = {clock};
  -- The counter moved since the driver read it (NULL: no row then, which
  -- lock made with 0): a grant or a break came in between.
  IF (SELECT fence FROM {keys} WHERE ns = p_ns AND k = v_k) <> COALESCE(p_expected, 0) THEN
    {leave}
    SELECT '-1,0';
  ELSE
    SELECT COUNT(*) INTO v_removed FROM {holders} WHERE ns = p_ns AND k = v_k AND expires_at > v_now;
    -- Dead, not released (0, which a release's retry counts): a removed
    -- holder's release, retried or not, counts nothing. Expired rows too, as
    -- a grant marks them: no clock stepped back brings one back.
    UPDATE {holders} SET expires_at = {dead} WHERE ns = p_ns AND k = v_k AND expires_at > {dead};
    SET v_fence = (SELECT GREATEST(fence + 1, v_now) FROM {keys} WHERE ns = p_ns AND k = v_k);
    UPDATE {keys} SET fence = v_fence,
      fence_until = GREATEST(fence_until, ((v_now + p_retention_ms * 1000) DIV v_bucket + 1) * v_bucket)
      WHERE ns = p_ns AND k = v_k;
    IF v_removed > 0 AND EXISTS (SELECT 1 FROM {waiting} WHERE ns = p_ns AND k = v_k AND lapses_at > v_now) THEN
      INSERT INTO {released} (ns, k, at_us) VALUES (p_ns, v_k, v_now);
    END IF;
    {leave}
    SELECT CONCAT(v_removed, ',', v_fence);
  END IF;
END",
    ),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled() {
        let table = Table::new("t");
        for statement in table.tables().into_iter().chain(table.procedures().into_iter().map(|(_, create)| create)) {
            assert!(!statement.contains('{'), "{statement}");
            assert!(!statement.contains("COMMENT") || statement.contains(VERSION));
        }
    }
}
