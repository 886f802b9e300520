-- The rows of one batch of a patch operation, locked for its transaction, with their payloads
-- (a row is patched only while it holds the payload the patch was computed from).
SELECT id, status, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256
FROM {schema}.dlq_events
WHERE id = ANY($1::int8[])
ORDER BY id
FOR UPDATE
