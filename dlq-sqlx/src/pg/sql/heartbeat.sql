-- Registers or refreshes a running retrier.
INSERT INTO {schema}.dlq_retriers (owner, host, pid, event_types, singleton)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (owner) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, event_types = EXCLUDED.event_types,
    singleton = EXCLUDED.singleton, last_seen = now()
