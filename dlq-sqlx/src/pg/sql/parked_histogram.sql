-- Rows parked per event type in $3 buckets of $2 seconds (whole hours) from $1 (an hour's
-- start), from dlq_parked_hours (migration 0010: no scan of dlq_events).
SELECT event_type,
       floor(extract(epoch FROM hour - $1) / $2)::int4 AS bucket,
       sum(n)::int8 AS count
FROM {schema}.dlq_parked_hours
WHERE hour >= $1 AND hour < $1 + make_interval(secs => $2 * $3)
GROUP BY 1, 2
