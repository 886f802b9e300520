SELECT count(*) FROM {schema}.dlq_events
