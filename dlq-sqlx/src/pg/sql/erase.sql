-- Deletes every row stored under the subject hash $1, whatever its status, with its history,
-- and records the erasure (the hash's prefix $2, the counts, actor $3 and reason $4), in one
-- statement. Rows are locked, not skipped: a row being claimed or settled is waited for.
WITH victims AS (
    SELECT id FROM {schema}.dlq_events WHERE subject = $1 FOR UPDATE
),
attempts AS (
    DELETE FROM {schema}.dlq_attempts WHERE dlq_id IN (SELECT id FROM victims) RETURNING 1
),
audit AS (
    DELETE FROM {schema}.dlq_audit WHERE dlq_id IN (SELECT id FROM victims) RETURNING 1
),
events AS (
    DELETE FROM {schema}.dlq_events WHERE id IN (SELECT id FROM victims) RETURNING 1
)
INSERT INTO {schema}.dlq_erasures (subject_prefix, erased_rows, erased_attempts, erased_audit, actor, reason)
SELECT $2, (SELECT count(*) FROM events), (SELECT count(*) FROM attempts), (SELECT count(*) FROM audit), $3, $4
RETURNING id, subject_prefix, erased_rows, erased_attempts, erased_audit, actor, reason, at
