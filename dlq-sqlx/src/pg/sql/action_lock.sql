-- The rows of one batch of an operator action, locked for its transaction.
SELECT id, status, payload_truncated, redrive_count FROM {schema}.dlq_events
WHERE id = ANY($1::int8[])
ORDER BY id
FOR UPDATE
