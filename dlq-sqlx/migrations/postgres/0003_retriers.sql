-- A heartbeat row per running retrier: refreshed periodically, removed on shutdown. A row
-- whose last_seen is old belongs to a retrier that died.

CREATE TABLE dlq_retriers (
    owner       TEXT PRIMARY KEY,
    host        TEXT        NOT NULL,
    pid         INTEGER     NOT NULL,
    event_types TEXT[]      NOT NULL,
    singleton   BOOLEAN     NOT NULL DEFAULT false,
    started_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_seen   TIMESTAMPTZ NOT NULL DEFAULT now()
);

ALTER TABLE dlq_retriers SET (autovacuum_vacuum_scale_factor = 0.01);
