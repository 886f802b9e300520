-- Pending and dead rows matching a filter (filter.sql) grouped by fingerprint and event type,
-- largest group first, at most ?5 groups. Kind and reason are the newest row's (SQLite takes
-- bare columns from the max() row).
SELECT fingerprint, event_type, error_kind, error_reason, max(id), count(*) AS n, min(created_at),
    max(created_at)
FROM dlq_events
WHERE {filter} AND status IN ('PENDING', 'FAILED_PERMANENTLY')
GROUP BY fingerprint, event_type
ORDER BY n DESC, fingerprint, event_type LIMIT ?5
