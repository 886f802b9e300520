-- The smallest id a row created at $1 or later can have (migration 0051): the lower end of the
-- id range a filter on creation time reads.
SELECT {schema}.dlq_first_id_since($1)
