-- Rows created per event type in $3 buckets of $2 seconds from $1 (a window the parks'
-- tallies do not answer): one range of the primary key, from $4, the first id a row created at
-- $1 or later can have (first_id_since.sql, NULL when not known), grouped.
SELECT event_type,
       floor(extract(epoch FROM created_at - $1) / $2)::int4 AS bucket,
       count(*) AS count
FROM {schema}.dlq_events
WHERE ($4::int8 IS NULL OR id >= $4)
  AND created_at >= $1 AND created_at < $1 + make_interval(secs => $2 * $3)
GROUP BY 1, 2
