-- Pending and dead rows grouped by fingerprint and event type, largest group first; kind and
-- sample reason come from the newest row of each group.
WITH g AS (
    SELECT fingerprint, event_type, max(id) AS newest, count(*) AS count,
        min(created_at) AS first_seen, max(created_at) AS last_seen
    FROM {schema}.dlq_events
    WHERE status IN ('PENDING', 'FAILED_PERMANENTLY')
      AND {filter}
    GROUP BY fingerprint, event_type
)
SELECT g.fingerprint, g.event_type, e.error_kind, e.error_reason, g.count, g.newest, g.first_seen, g.last_seen
FROM g JOIN {schema}.dlq_events e ON e.id = g.newest
ORDER BY g.count DESC, g.fingerprint, g.event_type
LIMIT $5
