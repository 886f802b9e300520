-- Rows created per event type in ?3 buckets of ?2 microseconds from ?1 (the console's
-- charts), by the created_at index.
SELECT event_type, (created_at - ?1) / ?2 AS bucket, count(*) FROM dlq_events
WHERE created_at >= ?1 AND created_at < ?1 + ?2 * ?3 GROUP BY 1, 2
