SELECT owner, host, pid, event_types, singleton, started_at, last_seen
FROM {schema}.dlq_retriers
ORDER BY started_at, owner
