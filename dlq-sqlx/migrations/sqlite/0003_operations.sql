-- Operator actions carry a reason; bulk actions are stored with their cursor so any process
-- can resume them without moving a row twice (as migrations/postgres/0006).

ALTER TABLE dlq_audit ADD COLUMN reason TEXT;

CREATE TABLE dlq_operations (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    action     TEXT    NOT NULL CHECK (action IN ('redrive', 'discard')),
    spec       TEXT    NOT NULL CHECK (json_valid(spec)),
    actor      TEXT    NOT NULL,
    reason     TEXT,
    cursor_id  INTEGER NOT NULL DEFAULT 0,
    moved      INTEGER NOT NULL DEFAULT 0,
    refused    INTEGER NOT NULL DEFAULT 0,
    state      TEXT    NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'stopped', 'done')),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
