-- Rows created in [$1, $2), counted up to $3 (migration 0010: always by the created_at index).
SELECT {schema}.dlq_count_created($1, $2, $3)
