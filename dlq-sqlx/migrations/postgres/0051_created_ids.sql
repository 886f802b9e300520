-- The smallest id parked in each bucket of dlq_parked_hours, so that a filter on creation time
-- walks the primary key from the first row it can match instead of reading a created_at index.
-- That index cost every parked row a B-tree insert (about a tenth of a bulk park's time in
-- PostgreSQL) to serve filters an operator rarely types: `--since`, a count or a chart of an
-- odd window. Migration 0053 drops it.
--
-- Every row lands in a bucket that starts at or before its created_at: its minute for two hours,
-- then its hour, for 31 days (migrations 0010 and 0030). So the rows created at or after a time
-- T all have ids at or above the smallest first_id of the buckets from T's hour on, provided
-- those buckets are all still kept (T's hour within the last 31 days) and all know their first
-- id. A bucket written by the previous release's park statement, or one written before this
-- migration that 0052 could not fill in, has none: then dlq_first_id_since gives no bound and
-- the filter walks the whole primary key, slower, never wrong. No bucket at all from T's hour
-- on means no row was created since T (the buckets are written in the transaction that
-- inserts the rows).
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

ALTER TABLE dlq_parked_hours ADD COLUMN first_id BIGINT;

COMMENT ON COLUMN dlq_parked_hours.first_id IS
    'dlq: no row of this bucket has a smaller id; NULL when unknown';

-- As in 0030, with each bucket's first id.
CREATE OR REPLACE FUNCTION dlq_tally() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
SET jit = off
AS $$
BEGIN
    IF current_setting('dlq.untallied', true) = 'on' THEN
        PERFORM set_config('dlq.untallied', '', true);
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO dlq_tallies
        SELECT event_type, dlq_tallied(status), fingerprint, count(*), min(created_at), max(created_at)
        FROM new_rows GROUP BY event_type, dlq_tallied(status), fingerprint;
        -- A backfill's older rows (the park statement's are all new) are counted per hour.
        INSERT INTO dlq_parked_hours
        SELECT event_type, at, count(*), min(id)
        FROM (
            SELECT event_type, id,
                   CASE WHEN created_at >= dlq_hour(now() - interval '2 hours') THEN dlq_minute(created_at)
                        ELSE dlq_hour(created_at) END AS at
            FROM new_rows
        ) AS parked
        GROUP BY event_type, at;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO dlq_tallies
        SELECT event_type, dlq_tallied(status), fingerprint, -count(*), NULL, NULL
        FROM old_rows GROUP BY event_type, dlq_tallied(status), fingerprint;
    ELSE
        -- A claim, a settlement, an operator's action: each row leaves its old key and enters
        -- its new one; keys whose rows stayed put net to zero and write nothing.
        INSERT INTO dlq_tallies
        SELECT event_type, status, fingerprint, sum(n), min(seen), max(seen)
        FROM (
            SELECT event_type, dlq_tallied(status) AS status, fingerprint, 1 AS n, created_at AS seen
            FROM new_rows
            UNION ALL
            SELECT event_type, dlq_tallied(status), fingerprint, -1, NULL FROM old_rows
        ) AS d
        GROUP BY event_type, status, fingerprint
        HAVING sum(n) <> 0;
    END IF;
    RETURN NULL;
END
$$;

-- As in 0030 (run as its owner, 0050), a folded bucket keeping its first id, unknown if any
-- of the rows folded into it did not know theirs.
CREATE OR REPLACE FUNCTION dlq_fold_tallies() RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path FROM CURRENT
SET jit = off
AS $$
DECLARE
    folded bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('dlq tallies ' || current_schema())) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM dlq_tallies RETURNING *
    ), kept AS (
        INSERT INTO dlq_tallies
        SELECT event_type, status, fingerprint, sum(n), min(first_seen), max(last_seen)
        FROM gone GROUP BY event_type, status, fingerprint
        HAVING sum(n) <> 0
    )
    SELECT count(*) INTO folded FROM gone;
    WITH gone AS (
        DELETE FROM dlq_parked_hours RETURNING *
    ), kept AS (
        INSERT INTO dlq_parked_hours
        SELECT event_type,
               CASE WHEN hour >= dlq_hour(now() - interval '2 hours') THEN hour ELSE dlq_hour(hour) END,
               sum(n),
               CASE WHEN bool_and(first_id IS NOT NULL) THEN min(first_id) END
        FROM gone WHERE hour >= now() - interval '31 days' GROUP BY 1, 2
    )
    SELECT folded + count(*) INTO folded FROM gone;
    RETURN folded;
END
$$;

-- The smallest id a row created at or after `since` can have (see above); the smallest bigint
-- when that is not known, the largest when no row was created since.
CREATE FUNCTION dlq_first_id_since(since timestamptz) RETURNS bigint
LANGUAGE sql
STABLE
SET search_path FROM CURRENT
SET jit = off
AS $$
    SELECT CASE
        WHEN since IS NULL OR dlq_hour(since) < now() - interval '31 days' THEN -9223372036854775808
        WHEN count(*) = 0 THEN 9223372036854775807
        WHEN bool_and(first_id IS NOT NULL) THEN min(first_id)
        ELSE -9223372036854775808
    END
    FROM dlq_parked_hours WHERE hour >= dlq_hour(since)
$$;

-- As in 0012, by the primary key from the first id that can match.
CREATE OR REPLACE FUNCTION dlq_count_created(since timestamptz, until timestamptz, cap bigint)
RETURNS bigint
LANGUAGE sql
STABLE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT count(*) FROM (
        SELECT 1 FROM dlq_events
        WHERE id >= (SELECT dlq_first_id_since(since))
          AND created_at >= coalesce(since, '-infinity') AND created_at < coalesce(until, 'infinity')
        LIMIT cap
    ) AS created
$$;
