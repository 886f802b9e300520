-- Rows matching a filter (filter.sql), oldest first, at most ?5.
SELECT {event_columns}
FROM dlq_events
WHERE {filter}
ORDER BY id ASC LIMIT ?5
