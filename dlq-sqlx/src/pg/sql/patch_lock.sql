SELECT status, payload, payload_raw FROM {schema}.dlq_events WHERE id = $1 FOR UPDATE
