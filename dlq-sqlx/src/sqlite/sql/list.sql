-- Rows matching a filter (filter.sql), newest first, at most ?5.
SELECT {event_columns}
FROM dlq_events
WHERE {filter}
ORDER BY id DESC LIMIT ?5
