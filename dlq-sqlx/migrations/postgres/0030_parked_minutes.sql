-- Parks counted per minute for the last two hours, so that the growth counts ("parked in the
-- last 5 minutes, in the last hour") read at most a few hundred tally rows, whatever the
-- table holds. They used to count the rows created in the window by the created_at index: at
-- 10 million rows, after an incident, an hour held 57,646 rows and the count took 92 ms.
--
-- dlq_parked_hours keeps its name and columns, so a store of the previous release still parks
-- against this schema (its rows land on their hour, and a growth window that starts inside
-- that hour does not see them until it is upgraded). Its `hour` column now holds the start of
-- a row's minute for the last two hours: the park statement and the trigger count by
-- dlq_minute (the trigger counts a backfill's older rows by hour), and the fold rounds rows
-- older than two hours down to their hour. A window of
-- whole hours sums the same rows as before (a minute lies inside its hour); a window of whole
-- minutes that starts within the last 90 minutes sums only minute rows.
CREATE FUNCTION dlq_minute(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT date_bin('1 minute', at, '1970-01-01 00:00:00+00') $$;

COMMENT ON TABLE dlq_parked_hours IS
    'dlq: rows parked per (event_type, minute of created_at, UTC) for the last two hours, per hour for 31 days, as appended counts; sum n per key';

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
        SELECT event_type, at, count(*)
        FROM (
            SELECT event_type,
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

-- As in 0010, with the minutes older than two hours rounded to their hour.
CREATE OR REPLACE FUNCTION dlq_fold_tallies() RETURNS bigint
LANGUAGE plpgsql
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
               sum(n)
        FROM gone WHERE hour >= now() - interval '31 days' GROUP BY 1, 2
    )
    SELECT folded + count(*) INTO folded FROM gone;
    RETURN folded;
END
$$;

-- The last two hours recounted per minute from the rows still there, while writers wait; what
-- a purge removed from those hours since stays on its hour, so an hour's total is unchanged.
LOCK TABLE dlq_events IN SHARE ROW EXCLUSIVE MODE;

WITH recent AS (
    DELETE FROM dlq_parked_hours WHERE hour >= dlq_hour(now() - interval '2 hours')
    RETURNING event_type, dlq_hour(hour) AS hour, n
), counted AS (
    SELECT event_type, dlq_minute(created_at) AS minute, count(*) AS n
    FROM dlq_events WHERE created_at >= dlq_hour(now() - interval '2 hours')
    GROUP BY 1, 2
), purged AS (
    SELECT event_type, hour, sum(n) - coalesce((
        SELECT sum(c.n) FROM counted AS c WHERE c.event_type = r.event_type AND dlq_hour(c.minute) = r.hour
    ), 0) AS n
    FROM recent AS r GROUP BY event_type, hour
)
INSERT INTO dlq_parked_hours
SELECT event_type, minute, n FROM counted
UNION ALL
SELECT event_type, hour, n FROM purged WHERE n > 0;
