-- Registers or refreshes running retrier ?1 (migration 0002) at ?6: a new row starts then, a
-- known one keeps its start and takes the new description and time.
INSERT INTO dlq_retriers (owner, host, pid, event_types, singleton, started_at, last_seen)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6)
ON CONFLICT (owner) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, event_types = excluded.event_types,
    singleton = excluded.singleton, last_seen = excluded.last_seen
