-- The ids of rows holding these dedupe keys (parked by a transaction that committed after
-- the park statement's snapshot).
SELECT dedupe_key, id FROM {schema}.dlq_events WHERE dedupe_key = ANY($1::text[])
