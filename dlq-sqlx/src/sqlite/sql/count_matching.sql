-- How many rows match a filter (filter.sql), counting at most ?5 (a bounded count).
SELECT count(*) FROM (SELECT 1 FROM dlq_events WHERE {filter} LIMIT ?5)
