-- Rows created per event type in $3 buckets of $2 seconds from $1 (the console's charts): one
-- range scan of the created_at index, grouped.
SELECT event_type,
       floor(extract(epoch FROM created_at - $1) / $2)::int4 AS bucket,
       count(*) AS count
FROM {schema}.dlq_events
WHERE created_at >= $1 AND created_at < $1 + make_interval(secs => $2 * $3)
GROUP BY 1, 2
