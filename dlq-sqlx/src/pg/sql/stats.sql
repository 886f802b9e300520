SELECT event_type, status, count(*) AS count FROM {schema}.dlq_events GROUP BY event_type, status
