-- The heartbeat rows of the running retriers, oldest first.
SELECT owner, host, pid, event_types, singleton, started_at, last_seen FROM dlq_retriers
ORDER BY started_at, owner
