-- Counts the SUCCEEDED/DISCARDED rows last updated before the cutoff ?1: what a purge would
-- delete now (`dlq purge` shows it before it asks).
SELECT count(*) FROM dlq_events WHERE status IN ('SUCCEEDED', 'DISCARDED') AND updated_at < ?1
