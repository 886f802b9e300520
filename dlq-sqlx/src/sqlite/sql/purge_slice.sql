-- One slice of a purge: the ids of the oldest SUCCEEDED/DISCARDED rows last updated before
-- the cutoff ?1, at most ?2, by the dlq_events_finished index. The slice's deletes
-- (purge_attempts.sql, purge_audit.sql, purge_events.sql) then take that list as a JSON array.
SELECT id FROM dlq_events
WHERE status IN ('SUCCEEDED', 'DISCARDED') AND updated_at < ?1
ORDER BY updated_at, id LIMIT ?2
