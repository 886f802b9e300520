-- Counts that need no scan of dlq_events: `dlq stats`, the console's overview and its failure
-- groups read these instead of aggregating a million rows (hundreds of milliseconds each).
--
-- Every statement that changes dlq_events appends its net change per (event type, status,
-- fingerprint) here, from a statement-level trigger over its transition tables: one row per
-- key a statement touched, never an update of a shared counter row (no hot row for
-- concurrent writers to queue on). A count is the sum of a key's rows. The retrier's upkeep
-- (`DeadLetterStore::maintain`, every heartbeat) folds the rows into one per key with
-- dlq_fold_tallies(); readers sum whatever is there, folded or not, so they never wait on it.
--
-- A claim (PENDING to PROCESSING, the retrier's most frequent write) changes no tally: rows in
-- flight are tallied as PENDING, and readers count the PROCESSING rows apart, by the small
-- partial index of leases (dlq_events_lease_expiry). The claim statement tells the trigger so
-- (`dlq.untallied`, set for the rest of its transaction, cleared by the trigger), which then
-- does nothing at all.
--
-- first_seen and last_seen are the earliest and latest `created_at` of the rows that entered
-- the key since it was last empty (a key whose count reaches 0 is dropped by the fold).
--
-- dlq_parked_hours counts the rows parked per event type and hour of `created_at` (UTC), for
-- the console's charts, the same way; it only ever grows (a purged row was still parked in
-- its hour), and the fold drops hours older than 31 days.

CREATE TABLE dlq_tallies (
    event_type  TEXT        NOT NULL,
    status      TEXT        NOT NULL,
    fingerprint TEXT        NOT NULL,
    n           BIGINT      NOT NULL,
    first_seen  TIMESTAMPTZ,
    last_seen   TIMESTAMPTZ
);

COMMENT ON TABLE dlq_tallies IS
    'dlq: row counts of dlq_events per (event_type, status, fingerprint), as appended deltas; sum n per key';

CREATE TABLE dlq_parked_hours (
    event_type TEXT        NOT NULL,
    hour       TIMESTAMPTZ NOT NULL,
    n          BIGINT      NOT NULL
);

COMMENT ON TABLE dlq_parked_hours IS
    'dlq: rows parked per (event_type, hour of created_at, UTC), as appended counts; sum n per key; 31 days kept';

-- The UTC hour of a time, whatever the session's time zone.
CREATE FUNCTION dlq_hour(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT to_timestamp(floor(extract(epoch FROM at) / 3600) * 3600) $$;

-- The status a row is tallied under: in flight counts as PENDING (see above).
CREATE FUNCTION dlq_tallied(status text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT CASE WHEN status = 'PROCESSING' THEN 'PENDING' ELSE status END $$;

CREATE FUNCTION dlq_tally() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
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
        INSERT INTO dlq_parked_hours
        SELECT event_type, dlq_hour(created_at), count(*)
        FROM new_rows GROUP BY event_type, dlq_hour(created_at);
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

CREATE FUNCTION dlq_tally_truncate() RETURNS trigger
LANGUAGE plpgsql
SET search_path FROM CURRENT
AS $$
BEGIN
    DELETE FROM dlq_tallies;
    DELETE FROM dlq_parked_hours;
    RETURN NULL;
END
$$;

-- Folds the appended rows into one per key (dropping keys whose count is 0); one caller at a
-- time, the others return at once. Returns how many rows it folded.
CREATE FUNCTION dlq_fold_tallies() RETURNS bigint
LANGUAGE plpgsql
SET search_path FROM CURRENT
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
        SELECT event_type, hour, sum(n)
        FROM gone WHERE hour >= now() - interval '31 days' GROUP BY event_type, hour
    )
    SELECT folded + count(*) INTO folded FROM gone;
    RETURN folded;
END
$$;

-- The rows already there, counted while writers wait (the migration's transaction holds the
-- lock until the triggers exist), so no change falls between the count and the triggers.
LOCK TABLE dlq_events IN SHARE ROW EXCLUSIVE MODE;

INSERT INTO dlq_tallies
SELECT event_type, dlq_tallied(status), fingerprint, count(*), min(created_at), max(created_at)
FROM dlq_events GROUP BY event_type, dlq_tallied(status), fingerprint;

INSERT INTO dlq_parked_hours
SELECT event_type, dlq_hour(created_at), count(*)
FROM dlq_events WHERE created_at >= now() - interval '31 days' GROUP BY event_type, dlq_hour(created_at);

CREATE TRIGGER dlq_tally_insert AFTER INSERT ON dlq_events
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dlq_tally();
CREATE TRIGGER dlq_tally_update AFTER UPDATE ON dlq_events
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION dlq_tally();
CREATE TRIGGER dlq_tally_delete AFTER DELETE ON dlq_events
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION dlq_tally();
CREATE TRIGGER dlq_tally_truncate AFTER TRUNCATE ON dlq_events
    FOR EACH STATEMENT EXECUTE FUNCTION dlq_tally_truncate();

-- Rows created in [since, until), counted up to cap: the overview's growth ("parked in the
-- last 5 minutes"). Always by the created_at index: on a table filled moments before (no
-- statistics yet) the planner would read the whole table for a window of a few thousand rows
-- (350 ms at a million rows, against 5 ms).
CREATE FUNCTION dlq_count_created(since timestamptz, until timestamptz, cap bigint)
RETURNS bigint
LANGUAGE sql
STABLE
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
    SELECT count(*) FROM (
        SELECT 1 FROM dlq_events
        WHERE created_at >= coalesce(since, '-infinity') AND created_at < coalesce(until, 'infinity')
        LIMIT cap
    ) AS created
$$;
