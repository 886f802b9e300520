-- Makes room under max_entries: deletes the $1 oldest rows that are finished or dead
-- (SUCCEEDED, DISCARDED, FAILED_PERMANENTLY), with their history. PENDING and PROCESSING
-- rows are never dropped.
WITH victims AS (
    SELECT id FROM {schema}.dlq_events
    WHERE status IN ('SUCCEEDED', 'DISCARDED', 'FAILED_PERMANENTLY')
    ORDER BY id
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
attempts AS (
    DELETE FROM {schema}.dlq_attempts WHERE dlq_id IN (SELECT id FROM victims)
),
audit AS (
    DELETE FROM {schema}.dlq_audit WHERE dlq_id IN (SELECT id FROM victims)
)
DELETE FROM {schema}.dlq_events WHERE id IN (SELECT id FROM victims)
