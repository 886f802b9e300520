-- Rows matching a filter (filter.sql: NULL / empty matches everything), oldest first (what bulk actions walk); the
-- keyset ($10, $11) is an id range on the primary key, never an OFFSET.
SELECT * FROM {schema}.dlq_events
WHERE {filter}
ORDER BY id ASC
LIMIT $5
