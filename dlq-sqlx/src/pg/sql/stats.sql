-- Rows by event type and status, from the tallies (migration 0010: no scan of dlq_events),
-- where rows in flight count as PENDING; the PROCESSING rows are counted apart, by the small
-- partial index of leases, and taken out of PENDING. With each type's oldest due retry_after
-- of PENDING rows (how long the oldest due row has waited): the first entry of the type's range
-- of the due index (migration 0032), whatever the due rows of other types.
WITH t AS (
    SELECT event_type, status, sum(n) AS count
    FROM {schema}.dlq_tallies
    GROUP BY event_type, status
),
p AS (
    SELECT event_type, count(*) AS count
    FROM {schema}.dlq_events
    WHERE status = 'PROCESSING'
    GROUP BY event_type
),
c AS (
    SELECT t.event_type, t.status,
        t.count - CASE WHEN t.status = 'PENDING' THEN coalesce(p.count, 0) ELSE 0 END AS count
    FROM t LEFT JOIN p ON p.event_type = t.event_type
    UNION ALL
    SELECT event_type, 'PROCESSING', count FROM p
)
SELECT c.event_type, c.status, c.count::bigint AS count, d.oldest_due
FROM c
LEFT JOIN LATERAL (
    SELECT e.retry_after AS oldest_due
    FROM {schema}.dlq_events AS e
    WHERE c.status = 'PENDING' AND e.status = 'PENDING' AND e.event_type = c.event_type
      AND e.retry_after <= now()
    ORDER BY e.retry_after, e.id
    LIMIT 1
) AS d ON true
WHERE c.count > 0
