-- Writes the patched payloads of one batch of a patch operation (rows locked and checked by
-- the caller; none SUCCEEDED, none cut), with one audit entry each, in one statement.
WITH edits AS (
    SELECT * FROM unnest($1::int8[], $2::jsonb[], $3::bytea[], $4::jsonb[]) AS e (id, payload, payload_raw, diff)
),
patched AS (
    UPDATE {schema}.dlq_events AS t SET
        payload = e.payload, payload_raw = e.payload_raw, payload_truncated = false,
        payload_original_len = NULL, payload_sha256 = NULL, updated_at = now()
    FROM edits AS e
    WHERE t.id = e.id
    RETURNING t.id
)
INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff, reason)
SELECT e.id, 'patch', $5, e.diff, $6 FROM edits AS e JOIN patched AS p ON p.id = e.id
ORDER BY e.id
