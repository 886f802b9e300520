-- Deletes up to $2 SUCCEEDED/DISCARDED rows last updated more than $1 microseconds ago and
-- after ($3, $4) in (updated_at, id) order ($3 NULL: from the first), oldest first, with their history; answers how many
-- went and the (updated_at, id) of the last of them. Called in slices so no transaction grows
-- large, each slice starting where the one before stopped: the index entries of deleted rows
-- stay until a VACUUM, and slices that each walked `dlq_events_finished_at` from its start
-- stepped over all of them (a purge of 3 million rows took quadratic time, docs/BENCHMARKS.md).
-- A row skipped because another transaction held it locked waits for the next purge.
WITH victims AS (
    SELECT id, updated_at FROM {schema}.dlq_events
    WHERE status IN ('SUCCEEDED', 'DISCARDED') AND updated_at < now() - $1 * INTERVAL '1 microsecond'
        AND (updated_at, id) > (COALESCE($3, '-infinity'::timestamptz), $4)
    ORDER BY updated_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
attempts AS (
    DELETE FROM {schema}.dlq_attempts WHERE dlq_id IN (SELECT id FROM victims)
),
audit AS (
    DELETE FROM {schema}.dlq_audit WHERE dlq_id IN (SELECT id FROM victims)
),
deleted AS (
    DELETE FROM {schema}.dlq_events WHERE id IN (SELECT id FROM victims) RETURNING 1
),
last AS (
    SELECT updated_at, id FROM victims ORDER BY updated_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM deleted), (SELECT updated_at FROM last), (SELECT id FROM last)
