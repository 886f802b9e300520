-- The rows of one batch of an operator action (?1, a JSON array of ids), with what the
-- refusal rule needs; the batch's write transaction holds the write lock, so they stay as read.
SELECT id, status, payload_truncated, redrive_count FROM dlq_events
WHERE id IN (SELECT value FROM json_each(?1))
ORDER BY id
