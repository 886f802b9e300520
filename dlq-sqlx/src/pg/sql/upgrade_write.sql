-- Rewrites a locked row's payload in a newer version of its contract and records it in the
-- audit log (action `upgrade`, migration 0020). The row's status and updated_at stay: a
-- SUCCEEDED row's success keeps its time (see attempts.sql).
WITH upgraded AS (
    UPDATE {schema}.dlq_events SET
        payload = $2, payload_raw = $3, payload_truncated = false, payload_original_len = NULL,
        payload_sha256 = NULL, version = $4
    WHERE id = $1
    RETURNING id
)
INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff, reason)
SELECT id, 'upgrade', $5, $6, $7 FROM upgraded
RETURNING id
