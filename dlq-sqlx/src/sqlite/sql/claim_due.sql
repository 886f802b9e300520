-- Event type ?1's due PENDING rows (retry_after up to now, ?2), oldest retry_after first, at
-- most ?3: its range of the dlq_events_type_due index (migration 0013).
SELECT id, retry_after, event_type FROM dlq_events
WHERE status = 'PENDING' AND event_type = ?1 AND retry_after <= ?2
ORDER BY retry_after, id LIMIT ?3
