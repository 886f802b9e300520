-- Counts the SUCCEEDED/DISCARDED rows last updated more than $1 microseconds ago: what
-- purge.sql would delete now (`dlq purge` shows it before it asks).
SELECT count(*) FROM {schema}.dlq_events
WHERE status IN ('SUCCEEDED', 'DISCARDED') AND updated_at < now() - $1 * INTERVAL '1 microsecond'
