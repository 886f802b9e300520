-- Replaces a row's payload and records the diff in the audit log. A SUCCEEDED row's success
-- lives in the row (see attempts.sql) with updated_at as its time: write it to the history
-- before updated_at moves.
WITH success AS (
    INSERT INTO {schema}.dlq_attempts (dlq_id, attempt, outcome, owner, at)
    SELECT e.id, e.retry_count + 1, 'succeeded', e.lease_owner, e.updated_at
    FROM {schema}.dlq_events AS e
    WHERE e.id = $1 AND e.status = 'SUCCEEDED'
      AND NOT EXISTS (SELECT 1 FROM {schema}.dlq_attempts AS a WHERE a.dlq_id = e.id AND a.outcome = 'succeeded')
),
patched AS (
    UPDATE {schema}.dlq_events SET
        payload = $2, payload_raw = $3, payload_truncated = $4, payload_original_len = $5,
        payload_sha256 = $6, updated_at = now()
    WHERE id = $1
    RETURNING id
)
INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff, reason)
SELECT id, 'patch', $7, $8, $9 FROM patched
RETURNING id
