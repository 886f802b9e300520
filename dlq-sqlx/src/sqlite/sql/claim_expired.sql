-- PROCESSING rows of the requested types (?1, a JSON array) whose lease expired by now (?2),
-- oldest retry_after first, at most ?3: claimed again as if due.
SELECT id, retry_after, event_type FROM dlq_events
WHERE status = 'PROCESSING' AND lease_until <= ?2 AND event_type IN (SELECT value FROM json_each(?1))
ORDER BY retry_after, id LIMIT ?3
