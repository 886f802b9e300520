-- Of the rows of a patch batch (locked: only a writer holding their lock marks them), those
-- operation $2 has patched already, by the mark in their audit entry.
SELECT DISTINCT dlq_id FROM {schema}.dlq_audit
WHERE dlq_id = ANY($1::int8[]) AND action = 'patch' AND diff->>'operation' = $2::text
