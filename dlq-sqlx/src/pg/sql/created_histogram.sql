-- Rows created per event type in $3 buckets of $2 seconds from $1 (the console's charts): one
-- range scan of the created_at index, which leaves out the rows in flight (migration 0012),
-- and those few by the lease index, grouped.
SELECT event_type,
       floor(extract(epoch FROM created_at - $1) / $2)::int4 AS bucket,
       count(*) AS count
FROM (
    SELECT event_type, created_at FROM {schema}.dlq_events
    WHERE status <> 'PROCESSING' AND created_at >= $1 AND created_at < $1 + make_interval(secs => $2 * $3)
    UNION ALL
    SELECT event_type, created_at FROM {schema}.dlq_events
    WHERE status = 'PROCESSING' AND created_at >= $1 AND created_at < $1 + make_interval(secs => $2 * $3)
) AS created
GROUP BY 1, 2
