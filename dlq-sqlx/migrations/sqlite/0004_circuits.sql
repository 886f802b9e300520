-- Outage-aware retries (docs/BREAKER.md), as migrations/postgres/0007: one circuit row per
-- event type written by compare-and-set on `version`, and the log of every change.

CREATE TABLE dlq_circuits (
    event_type   TEXT PRIMARY KEY,
    state        TEXT    NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    open_until   INTEGER,
    cool_down_us INTEGER NOT NULL DEFAULT 0,
    trial_owner  TEXT,
    trial_until  INTEGER,
    paused       INTEGER NOT NULL DEFAULT 0,
    paused_by    TEXT,
    pause_reason TEXT,
    reason       TEXT,
    version      INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);

CREATE TABLE dlq_circuit_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type TEXT    NOT NULL,
    from_state TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    reason     TEXT    NOT NULL,
    actor      TEXT    NOT NULL,
    at         INTEGER NOT NULL
);

CREATE INDEX dlq_circuit_log_type ON dlq_circuit_log (event_type, id);
