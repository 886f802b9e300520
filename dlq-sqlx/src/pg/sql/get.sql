SELECT * FROM {schema}.dlq_events WHERE id = $1
