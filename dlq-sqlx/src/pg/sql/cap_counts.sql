-- For a capped claim of type $1 (migration 0011): its rows under a live lease, and the rows
-- capped claims took within the last $2 microseconds. Read while holding the type's lock.
SELECT
    (SELECT count(*) FROM {schema}.dlq_events
     WHERE status = 'PROCESSING' AND event_type = $1 AND lease_until > clock_timestamp()) AS in_flight,
    (SELECT coalesce(sum(n), 0)::int8 FROM {schema}.dlq_starts
     WHERE event_type = $1 AND at > clock_timestamp() - $2 * INTERVAL '1 microsecond') AS started
