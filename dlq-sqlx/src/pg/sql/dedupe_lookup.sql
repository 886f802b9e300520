-- The ids of the live rows (not SUCCEEDED or DISCARDED) holding these (event type, dedupe key)
-- pairs, $1 and $2 side by side: rows parked by a transaction that committed after the park
-- statement's snapshot. Read through the unique index of migration 0017.
SELECT e.event_type, e.dedupe_key, e.id
FROM unnest($1::text[], $2::text[]) AS k (event_type, dedupe_key)
JOIN {schema}.dlq_events AS e ON e.event_type = k.event_type AND e.dedupe_key = k.dedupe_key
WHERE e.dedupe_key IS NOT NULL AND e.status NOT IN ('SUCCEEDED', 'DISCARDED')
