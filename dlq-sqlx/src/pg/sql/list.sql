-- Rows matching a filter (NULL / empty matches everything), newest first.
SELECT * FROM {schema}.dlq_events
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR event_type = $2)
  AND ($3::text IS NULL OR fingerprint = $3)
  AND (cardinality($4::int8[]) = 0 OR id = ANY($4::int8[]))
ORDER BY id DESC
LIMIT $5
