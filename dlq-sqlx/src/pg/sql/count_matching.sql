-- How many rows match a filter, counting at most $5 (a bounded count).
SELECT count(*) FROM (
    SELECT 1 FROM {schema}.dlq_events
    WHERE {filter}
    LIMIT $5
) AS matching
