-- Pending and dead rows grouped by fingerprint and event type, largest group first, from the
-- tallies (migration 0010: no scan of dlq_events), less the rows in flight (tallied as PENDING,
-- counted here by the small partial index of leases); for a filter of status, event type and
-- fingerprint only ($1..$3 as in filter.sql; $4 the limit). Kind and sample reason come from
-- the newest row of each group, found by walking the (fingerprint, id) index back from the
-- newest row (the status test, in plain sight, proves that partial index's predicate,
-- migration 0012; the CASE keeps the planner off the (event_type, status, id) index, which on
-- a table without statistics it would pick and then read every row of the type: seconds at a
-- million rows).
WITH t AS (
    SELECT fingerprint, event_type, sum(n) AS n, min(first_seen) AS first_seen, max(last_seen) AS last_seen
    FROM {schema}.dlq_tallies
    WHERE status IN ('PENDING', 'FAILED_PERMANENTLY')
      AND ($1::text IS NULL OR status = $1)
      AND ($2::text IS NULL OR event_type = $2)
      AND ($3::text IS NULL OR fingerprint = $3)
    GROUP BY fingerprint, event_type
),
p AS (
    SELECT fingerprint, event_type, count(*) AS n
    FROM {schema}.dlq_events
    WHERE status = 'PROCESSING'
      AND ($1::text IS NULL OR $1 = 'PENDING')
      AND ($2::text IS NULL OR event_type = $2)
      AND ($3::text IS NULL OR fingerprint = $3)
    GROUP BY fingerprint, event_type
),
g AS (
    SELECT t.fingerprint, t.event_type, (t.n - coalesce(p.n, 0))::bigint AS count, t.first_seen, t.last_seen
    FROM t LEFT JOIN p ON p.fingerprint = t.fingerprint AND p.event_type = t.event_type
    WHERE t.n - coalesce(p.n, 0) > 0
    ORDER BY count DESC, t.fingerprint, t.event_type
    LIMIT $4
)
SELECT g.fingerprint, g.event_type, s.error_kind, s.error_reason, g.count, s.id AS newest,
    g.first_seen, g.last_seen
FROM g
CROSS JOIN LATERAL (
    SELECT e.id, e.error_kind, e.error_reason
    FROM {schema}.dlq_events AS e
    WHERE e.fingerprint = g.fingerprint
      AND e.status IN ('PENDING', 'FAILED_PERMANENTLY')
      AND CASE WHEN e.event_type = g.event_type THEN true ELSE false END
    ORDER BY e.fingerprint DESC, e.id DESC
    LIMIT 1
) AS s
ORDER BY g.count DESC, g.fingerprint, g.event_type
