UPDATE {schema}.dlq_operations SET state = $2, updated_at = now() WHERE id = $1
