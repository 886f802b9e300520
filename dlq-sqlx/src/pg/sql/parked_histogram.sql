-- Rows parked per event type in $3 buckets of $2 seconds from $1, from dlq_parked_hours
-- (migrations 0010 and 0030: no scan of dlq_events). The caller asks for whole hours from an
-- hour's start, or whole minutes from a minute's start within the last 90 minutes, where the
-- rows are still per minute.
SELECT event_type,
       floor(extract(epoch FROM hour - $1) / $2)::int4 AS bucket,
       sum(n)::int8 AS count
FROM {schema}.dlq_parked_hours
WHERE hour >= $1 AND hour < $1 + make_interval(secs => $2 * $3)
GROUP BY 1, 2
