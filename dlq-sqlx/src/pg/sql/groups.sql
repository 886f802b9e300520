-- Pending and dead rows grouped by fingerprint and event type, largest group first; kind and
-- sample reason come from the newest row of each group.
WITH g AS (
    SELECT fingerprint, event_type, max(id) AS newest, count(*) AS count
    FROM {schema}.dlq_events
    WHERE status IN ('PENDING', 'FAILED_PERMANENTLY')
      AND ($1::text IS NULL OR status = $1)
      AND ($2::text IS NULL OR event_type = $2)
      AND ($3::text IS NULL OR fingerprint = $3)
      AND (cardinality($4::int8[]) = 0 OR id = ANY($4::int8[]))
    GROUP BY fingerprint, event_type
)
SELECT g.fingerprint, g.event_type, e.error_kind, e.error_reason, g.count
FROM g JOIN {schema}.dlq_events e ON e.id = g.newest
ORDER BY g.count DESC, g.fingerprint, g.event_type
LIMIT $5
