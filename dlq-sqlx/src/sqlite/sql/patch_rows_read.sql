-- The rows of a patch operation's batch (?1, a JSON array of ids) whole, with their payloads,
-- read in the batch's write transaction.
SELECT {event_columns}
FROM dlq_events WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id
