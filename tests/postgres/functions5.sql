-- What a driver of functions 5 (dokebi-lock at bdab2f0) runs when it does not find
-- its own version installed (Table::create_sql of that commit), for the schema __SCHEMA__.
CREATE SCHEMA IF NOT EXISTS "__SCHEMA__";

CREATE TABLE IF NOT EXISTS "__SCHEMA__"."dokebi_lock" (
  namespace text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  fence bigint NOT NULL,
  fence_until timestamptz NOT NULL,
  PRIMARY KEY (namespace, key)
) WITH (fillfactor = 70);
CREATE INDEX IF NOT EXISTS dokebi_fence_until ON "__SCHEMA__"."dokebi_lock" (fence_until);
CREATE TABLE IF NOT EXISTS "__SCHEMA__"."dokebi_lock_holders" (
  namespace text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  slot integer NOT NULL,
  token text NOT NULL,
  shared boolean NOT NULL,
  lim integer NOT NULL,
  weight integer NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (namespace, key, slot)
) WITH (fillfactor = 50);
DO $migrate$
BEGIN
  -- A holders table of functions 4 or older (a row per grant, keyed by
  -- token): its rows get slots, and the key becomes the slot.
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '"__SCHEMA__"."dokebi_lock_holders"'::regclass AND attname = 'slot' AND NOT attisdropped) THEN
    ALTER TABLE "__SCHEMA__"."dokebi_lock_holders" ADD COLUMN slot integer;
    UPDATE "__SCHEMA__"."dokebi_lock_holders" h SET slot = n.slot
      FROM (SELECT ctid AS row_id, (row_number() OVER (PARTITION BY namespace, key ORDER BY token) - 1)::integer AS slot FROM "__SCHEMA__"."dokebi_lock_holders") n
      WHERE h.ctid = n.row_id;
    ALTER TABLE "__SCHEMA__"."dokebi_lock_holders" ALTER COLUMN slot SET NOT NULL;
    EXECUTE format('ALTER TABLE "__SCHEMA__"."dokebi_lock_holders" DROP CONSTRAINT %I',
      (SELECT conname FROM pg_constraint WHERE conrelid = '"__SCHEMA__"."dokebi_lock_holders"'::regclass AND contype = 'p'));
    ALTER TABLE "__SCHEMA__"."dokebi_lock_holders" ADD PRIMARY KEY (namespace, key, slot);
    ALTER TABLE "__SCHEMA__"."dokebi_lock_holders" SET (fillfactor = 50);
    ALTER TABLE "__SCHEMA__"."dokebi_lock" SET (fillfactor = 70);
  END IF;
END
$migrate$;
CREATE TABLE IF NOT EXISTS "__SCHEMA__"."dokebi_lock_waiting" (
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
  IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = '"__SCHEMA__"."dokebi_lock_waiting"'::regclass AND attname = 'slot' AND NOT attisdropped) THEN
    ALTER TABLE "__SCHEMA__"."dokebi_lock_waiting" ADD COLUMN slot integer;
    UPDATE "__SCHEMA__"."dokebi_lock_waiting" w SET slot = n.slot
      FROM (SELECT ctid AS row_id, (row_number() OVER (PARTITION BY namespace, key ORDER BY token) - 1)::integer AS slot FROM "__SCHEMA__"."dokebi_lock_waiting") n
      WHERE w.ctid = n.row_id;
    ALTER TABLE "__SCHEMA__"."dokebi_lock_waiting" ALTER COLUMN slot SET NOT NULL;
    EXECUTE format('ALTER TABLE "__SCHEMA__"."dokebi_lock_waiting" DROP CONSTRAINT %I',
      (SELECT conname FROM pg_constraint WHERE conrelid = '"__SCHEMA__"."dokebi_lock_waiting"'::regclass AND contype = 'p'));
    ALTER TABLE "__SCHEMA__"."dokebi_lock_waiting" ADD PRIMARY KEY (namespace, key, slot);
    ALTER TABLE "__SCHEMA__"."dokebi_lock_waiting" SET (fillfactor = 50);
  END IF;
END
$migrate$;

CREATE OR REPLACE FUNCTION "__SCHEMA__"."dokebi_lock_lock_keys"(p_ns text, p_keys text[])
RETURNS text[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  sorted text[] := ARRAY(SELECT DISTINCT u COLLATE "C" FROM unnest(p_keys) u ORDER BY 1);
  k text;
BEGIN
  FOREACH k IN ARRAY sorted LOOP
    LOOP
      PERFORM 1 FROM "__SCHEMA__"."dokebi_lock" WHERE namespace = p_ns AND key = k FOR UPDATE;
      EXIT WHEN FOUND;
      INSERT INTO "__SCHEMA__"."dokebi_lock" (namespace, key, fence, fence_until) VALUES (p_ns, k, 0, clock_timestamp()) ON CONFLICT DO NOTHING;
      EXIT WHEN FOUND;
    END LOOP;
  END LOOP;
  RETURN sorted;
END
$fn$;

CREATE OR REPLACE FUNCTION "__SCHEMA__"."dokebi_lock_take"(p_ns text, p_keys text[], p_token text, p_shared boolean, p_limit integer,
  p_weight integer, p_lease_ms bigint, p_waiting_ms bigint, p_ticket bigint, p_retention_ms bigint, p_lock_timeout_ms bigint)
RETURNS bigint[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
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
  placed integer;
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  sorted := "__SCHEMA__"."dokebi_lock_lock_keys"(p_ns, p_keys);
  -- A key nobody holds and nobody else waits for (the usual case, and a
  -- waiter's try after the release it was woken by) is granted without the
  -- checks below: one look at both tables instead of five statements.
  SELECT count(*) FILTER (WHERE NOT o.mine), count(*) FILTER (WHERE o.mine) INTO others, own FROM (
    (SELECT false AS mine FROM "__SCHEMA__"."dokebi_lock_holders" WHERE namespace = p_ns AND key = ANY (sorted) AND expires_at > now_ts LIMIT 1)
    UNION ALL SELECT w.token = p_token FROM "__SCHEMA__"."dokebi_lock_waiting" w WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.lapses_at > now_ts
  ) o;
  IF others > 0 THEN
    -- A request that waited keeps its place, whatever ticket it passes: its
    -- token's oldest live mark.
    SELECT coalesce(least(nullif(p_ticket, 0), min(w.ticket)), 0) INTO place FROM "__SCHEMA__"."dokebi_lock_waiting" w
      WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.token = p_token AND w.lapses_at > now_ts;
    SELECT min(array_position(p_keys, o.key::text)) INTO at FROM (
      SELECT h.key FROM "__SCHEMA__"."dokebi_lock_holders" h WHERE h.namespace = p_ns AND h.key = ANY (sorted) AND h.token <> p_token AND h.lim <> p_limit
        AND h.expires_at > now_ts
      UNION ALL
      SELECT w.key FROM "__SCHEMA__"."dokebi_lock_waiting" w WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.token <> p_token AND w.lim <> p_limit
        AND w.lapses_at > now_ts
    ) o;
    IF at IS NOT NULL THEN
      PERFORM set_config('synchronous_commit', 'off', true);
      RETURN ARRAY[-1, at];
    END IF;
    SELECT array_agg(b.key), min(b.until) INTO blocked, hint FROM (
      SELECT h.key, (extract(epoch FROM min(h.expires_at) - now_ts) * 1000)::bigint AS until
      FROM "__SCHEMA__"."dokebi_lock_holders" h WHERE h.namespace = p_ns AND h.key = ANY (sorted) AND h.token <> p_token AND h.expires_at > now_ts
      GROUP BY h.key
      HAVING CASE WHEN p_shared THEN bool_or(NOT h.shared)
                  WHEN p_limit = 1 THEN true
                  ELSE sum(h.weight) + p_weight > p_limit END
      UNION
      SELECT w.key, NULL FROM "__SCHEMA__"."dokebi_lock_waiting" w
      WHERE w.namespace = p_ns AND w.key = ANY (sorted) AND w.token <> p_token AND w.lapses_at > now_ts
        AND (place = 0 OR (w.ticket, w.token) < (place, p_token)) AND NOT (p_shared AND w.shared)
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
        UPDATE "__SCHEMA__"."dokebi_lock_waiting" w SET ticket = least(w.ticket, place), lapses_at = greatest(w.lapses_at, now_ts + p_waiting_ms * interval '1 millisecond')
          WHERE w.namespace = p_ns AND w.key = ANY (blocked) AND w.token = p_token AND w.lapses_at > now_ts;
        GET DIAGNOSTICS placed = ROW_COUNT;
        IF placed < cardinality(blocked) THEN
          WITH pick AS (
            SELECT b AS key, (SELECT w.slot FROM "__SCHEMA__"."dokebi_lock_waiting" w WHERE w.namespace = p_ns AND w.key = b AND w.lapses_at <= now_ts
                              ORDER BY w.slot LIMIT 1) AS slot
            FROM unnest(blocked) b
            WHERE NOT EXISTS (SELECT 1 FROM "__SCHEMA__"."dokebi_lock_waiting" w WHERE w.namespace = p_ns AND w.key = b AND w.token = p_token AND w.lapses_at > now_ts)
          )
          UPDATE "__SCHEMA__"."dokebi_lock_waiting" w SET token = p_token, ticket = place, shared = p_shared, lim = p_limit,
            lapses_at = now_ts + p_waiting_ms * interval '1 millisecond'
            FROM pick WHERE w.namespace = p_ns AND w.key = pick.key AND w.slot = pick.slot;
          INSERT INTO "__SCHEMA__"."dokebi_lock_waiting" (namespace, key, slot, token, ticket, shared, lim, lapses_at)
            SELECT p_ns, b, coalesce((SELECT max(w.slot) + 1 FROM "__SCHEMA__"."dokebi_lock_waiting" w WHERE w.namespace = p_ns AND w.key = b), 0), p_token, place,
              p_shared, p_limit, now_ts + p_waiting_ms * interval '1 millisecond'
            FROM unnest(blocked) b
            WHERE NOT EXISTS (SELECT 1 FROM "__SCHEMA__"."dokebi_lock_waiting" w WHERE w.namespace = p_ns AND w.key = b AND w.token = p_token AND w.lapses_at > now_ts);
        END IF;
      END IF;
      PERFORM set_config('synchronous_commit', 'off', true);
      RETURN ARRAY[0, coalesce(hint, -1), place];
    END IF;
  ELSE
    place := 0;
  END IF;
  -- fence_until only moves forward, a retention bucket at a time: a grant
  -- that leaves it as it was changes no indexed column, so the update is a
  -- HOT one (no new index entries, the old version pruned in place).
  WITH raised AS (
    UPDATE "__SCHEMA__"."dokebi_lock" r SET fence = greatest(r.fence + 1, clock_us), fence_until = greatest(r.fence_until, retain_until)
    WHERE r.namespace = p_ns AND r.key = ANY (sorted)
    RETURNING r.key, r.fence
  ) SELECT array_agg(raised.fence ORDER BY array_position(p_keys, raised.key::text)) INTO fences FROM raised;
  -- Each key's holder row: this token's (a retry whose answer was lost),
  -- else a free slot (released or lapsed), else a new slot. Holder rows are
  -- updated in place, never deleted by a release: nothing of them is
  -- indexed but the slot, so the updates are HOT ones (the old version
  -- pruned in its page, no VACUUM needed, no index entry added).
  WITH pick AS (
    SELECT k AS key, (SELECT h.slot FROM "__SCHEMA__"."dokebi_lock_holders" h WHERE h.namespace = p_ns AND h.key = k AND (h.token = p_token OR h.expires_at <= now_ts)
                      ORDER BY h.token = p_token DESC, h.slot LIMIT 1) AS slot
    FROM unnest(sorted) k
  )
  UPDATE "__SCHEMA__"."dokebi_lock_holders" h SET token = p_token, shared = p_shared, lim = p_limit, weight = p_weight,
    expires_at = now_ts + p_lease_ms * interval '1 millisecond'
    FROM pick WHERE h.namespace = p_ns AND h.key = pick.key AND h.slot = pick.slot;
  GET DIAGNOSTICS placed = ROW_COUNT;
  IF placed < cardinality(sorted) THEN
    INSERT INTO "__SCHEMA__"."dokebi_lock_holders" (namespace, key, slot, token, shared, lim, weight, expires_at)
      SELECT p_ns, k, coalesce((SELECT max(h.slot) + 1 FROM "__SCHEMA__"."dokebi_lock_holders" h WHERE h.namespace = p_ns AND h.key = k), 0), p_token, p_shared,
        p_limit, p_weight, now_ts + p_lease_ms * interval '1 millisecond'
      FROM unnest(sorted) k
      WHERE NOT EXISTS (SELECT 1 FROM "__SCHEMA__"."dokebi_lock_holders" h WHERE h.namespace = p_ns AND h.key = k AND h.token = p_token);
  END IF;
  IF place <> 0 OR own > 0 THEN
    UPDATE "__SCHEMA__"."dokebi_lock_waiting" SET lapses_at = '-infinity' WHERE namespace = p_ns AND key = ANY (sorted) AND token = p_token AND lapses_at > now_ts;
  END IF;
  RETURN ARRAY[1] || fences;
END
$fn$;

CREATE OR REPLACE FUNCTION "__SCHEMA__"."dokebi_lock_renew"(p_ns text, p_keys text[], p_token text, p_lease_ms bigint)
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  now_ts timestamptz := clock_timestamp();
  renewed integer;
BEGIN
  UPDATE "__SCHEMA__"."dokebi_lock_holders" SET expires_at = now_ts + p_lease_ms * interval '1 millisecond'
    WHERE namespace = p_ns AND key = ANY (p_keys) AND token = p_token AND expires_at > now_ts;
  GET DIAGNOSTICS renewed = ROW_COUNT;
  RETURN renewed;
END
$fn$;

CREATE OR REPLACE FUNCTION "__SCHEMA__"."dokebi_lock_give_back"(p_ns text, p_keys text[], p_token text, p_channel text, p_retry boolean)
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  now_ts timestamptz := clock_timestamp();
  released integer;
  freed text[];
  cleaned integer;
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM "__SCHEMA__"."dokebi_lock" WHERE namespace = p_ns AND key = ANY (p_keys) ORDER BY key FOR UPDATE;
  -- A released row stays, free, with its token and the expiry -infinity,
  -- which only a release writes: a retry of a release whose answer was
  -- lost (p_retry) counts what the first attempt released too.
  WITH gone AS (
    UPDATE "__SCHEMA__"."dokebi_lock_holders" SET expires_at = '-infinity'
    WHERE namespace = p_ns AND key = ANY (p_keys) AND token = p_token AND expires_at > now_ts RETURNING key
  ) SELECT count(*), array_agg(key) INTO released, freed FROM gone;
  IF p_retry THEN
    SELECT count(*) INTO released FROM "__SCHEMA__"."dokebi_lock_holders"
      WHERE namespace = p_ns AND key = ANY (p_keys) AND token = p_token AND expires_at = '-infinity';
  END IF;
  PERFORM pg_notify(p_channel, CASE WHEN octet_length(p_ns) + octet_length(w.key) < 7900
                                    THEN octet_length(p_ns) || ':' || p_ns || w.key ELSE '' END)
    FROM (SELECT DISTINCT key FROM "__SCHEMA__"."dokebi_lock_waiting" WHERE namespace = p_ns AND key = ANY (freed) AND lapses_at > now_ts) w;
  -- The clean-up's four statements only when a key row's retention has
  -- passed (one index probe otherwise).
  PERFORM 1 FROM "__SCHEMA__"."dokebi_lock" WHERE fence_until < now_ts LIMIT 1;
  IF NOT FOUND THEN
    RETURN released;
  END IF;
  WITH old AS (
    SELECT r.namespace, r.key FROM "__SCHEMA__"."dokebi_lock" r WHERE r.fence_until < now_ts ORDER BY r.fence_until LIMIT 4 FOR UPDATE SKIP LOCKED
  ), idle AS (
    DELETE FROM "__SCHEMA__"."dokebi_lock" r USING old WHERE r.namespace = old.namespace AND r.key = old.key
      AND NOT EXISTS (SELECT 1 FROM "__SCHEMA__"."dokebi_lock_holders" h WHERE h.namespace = r.namespace AND h.key = r.key AND h.expires_at > now_ts)
      AND NOT EXISTS (SELECT 1 FROM "__SCHEMA__"."dokebi_lock_waiting" w WHERE w.namespace = r.namespace AND w.key = r.key AND w.lapses_at > now_ts)
    RETURNING r.namespace, r.key
  ), holders_gone AS (
    DELETE FROM "__SCHEMA__"."dokebi_lock_holders" h USING idle WHERE h.namespace = idle.namespace AND h.key = idle.key
  ), waiting_gone AS (
    DELETE FROM "__SCHEMA__"."dokebi_lock_waiting" w USING idle WHERE w.namespace = idle.namespace AND w.key = idle.key
  ) SELECT count(*) INTO cleaned FROM idle;
  RETURN released;
END
$fn$;

-- What drivers of functions 4 call.
CREATE OR REPLACE FUNCTION "__SCHEMA__"."dokebi_lock_give_back"(p_ns text, p_keys text[], p_token text, p_channel text)
RETURNS integer LANGUAGE sql AS $fn$ SELECT "__SCHEMA__"."dokebi_lock_give_back"(p_ns, p_keys, p_token, p_channel, false) $fn$;

CREATE OR REPLACE FUNCTION "__SCHEMA__"."dokebi_lock_withdraw"(p_ns text, p_keys text[], p_token text, p_channel text)
RETURNS integer LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  now_ts timestamptz := clock_timestamp();
  withdrawn text[];
BEGIN
  PERFORM set_config('synchronous_commit', 'off', true);
  PERFORM 1 FROM "__SCHEMA__"."dokebi_lock" WHERE namespace = p_ns AND key = ANY (p_keys) ORDER BY key FOR UPDATE;
  WITH gone AS (
    UPDATE "__SCHEMA__"."dokebi_lock_waiting" SET lapses_at = '-infinity' WHERE namespace = p_ns AND key = ANY (p_keys) AND token = p_token AND lapses_at > now_ts
    RETURNING key
  ) SELECT array_agg(key) INTO withdrawn FROM gone;
  PERFORM pg_notify(p_channel, CASE WHEN octet_length(p_ns) + octet_length(w.key) < 7900
                                    THEN octet_length(p_ns) || ':' || p_ns || w.key ELSE '' END)
    FROM (SELECT DISTINCT key FROM "__SCHEMA__"."dokebi_lock_waiting" WHERE namespace = p_ns AND key = ANY (withdrawn) AND lapses_at > now_ts) w;
  RETURN coalesce(cardinality(withdrawn), 0);
END
$fn$;

CREATE OR REPLACE FUNCTION "__SCHEMA__"."dokebi_lock_hand_over"(p_ns text, p_channel text, p_lease_ms bigint, p_waiting_ms bigint, p_retention_ms bigint,
  p_lock_timeout_ms bigint, p_released_keys text[], p_released_token text, p_tokens text[], p_shared boolean[], p_limits integer[],
  p_weights integer[], p_tickets bigint[], p_counts integer[], p_keys text[])
RETURNS bigint[] LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
  durability text := current_setting('synchronous_commit');
  released integer := 0;
  reply bigint[];
  answers bigint[] := '{}';
  answer bigint[];
  granted boolean := false;
  at integer := 1;
  r integer;
BEGIN
  PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
  PERFORM "__SCHEMA__"."dokebi_lock_lock_keys"(p_ns, p_released_keys || p_keys);
  IF cardinality(p_released_keys) > 0 THEN
    released := "__SCHEMA__"."dokebi_lock_give_back"(p_ns, p_released_keys, p_released_token, p_channel, false);
  END IF;
  FOR r IN 1 .. coalesce(cardinality(p_tokens), 0) LOOP
    answer := "__SCHEMA__"."dokebi_lock_take"(p_ns, p_keys[at : at + p_counts[r] - 1], p_tokens[r], p_shared[r], p_limits[r], p_weights[r], p_lease_ms,
      CASE WHEN r = 1 THEN p_waiting_ms ELSE 0 END, p_tickets[r], p_retention_ms, p_lock_timeout_ms);
    answers := answers || answer;
    EXIT WHEN answer[1] <> 1;
    granted := true;
    at := at + p_counts[r];
  END LOOP;
  IF granted THEN
    PERFORM set_config('synchronous_commit', durability, true);
  END IF;
  reply := ARRAY[released::bigint];
  reply := reply || ARRAY(
    SELECT CASE WHEN EXISTS (SELECT 1 FROM "__SCHEMA__"."dokebi_lock_holders" h WHERE h.namespace = p_ns AND h.key = u.key AND NOT h.shared AND h.lim = 1
                                AND h.expires_at > clock_timestamp()) THEN 0 ELSE 1 END
    FROM unnest(p_released_keys) WITH ORDINALITY AS u(key, ord) ORDER BY u.ord);
  RETURN reply || answers;
END
$fn$;
COMMENT ON FUNCTION "__SCHEMA__"."dokebi_lock_take"(text, text[], text, boolean, integer, integer, bigint, bigint, bigint, bigint, bigint) IS 'dokebi-lock functions 5';
