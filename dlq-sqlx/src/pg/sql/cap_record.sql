-- Records a capped claim of type $1 that took $2 rows, and forgets those older than the
-- cap's window ($3 microseconds): they no longer count (migration 0011).
WITH forgotten AS (
    DELETE FROM {schema}.dlq_starts
    WHERE event_type = $1 AND at <= clock_timestamp() - $3 * INTERVAL '1 microsecond'
)
INSERT INTO {schema}.dlq_starts (event_type, at, n) VALUES ($1, clock_timestamp(), $2)
