-- Deletes up to $2 SUCCEEDED/DISCARDED rows last updated more than $1 microseconds ago,
-- with their history. Called in slices so no transaction grows large.
WITH victims AS (
    SELECT id FROM {schema}.dlq_events
    WHERE status IN ('SUCCEEDED', 'DISCARDED') AND updated_at < now() - $1 * INTERVAL '1 microsecond'
    LIMIT $2
    FOR UPDATE SKIP LOCKED
),
attempts AS (
    DELETE FROM {schema}.dlq_attempts WHERE dlq_id IN (SELECT id FROM victims)
),
audit AS (
    DELETE FROM {schema}.dlq_audit WHERE dlq_id IN (SELECT id FROM victims)
)
DELETE FROM {schema}.dlq_events WHERE id IN (SELECT id FROM victims)
