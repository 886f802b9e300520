-- Rows created in [$1, $2), counted up to $3: by the primary key from the first id such a row
-- can have (migration 0051).
SELECT {schema}.dlq_count_created($1, $2, $3)
