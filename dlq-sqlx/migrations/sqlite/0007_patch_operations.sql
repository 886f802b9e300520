-- A group patch runs as a stored, resumable operation, like a bulk redrive or discard:
-- `patch` joins the actions dlq_operations accepts (as migrations/postgres/0019). SQLite
-- cannot alter a CHECK, so the table, a few operator rows, is rebuilt with its rows and ids.

CREATE TABLE dlq_operations_next (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    action     TEXT    NOT NULL CHECK (action IN ('redrive', 'discard', 'patch')),
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
INSERT INTO dlq_operations_next (id, action, spec, actor, reason, cursor_id, moved, refused, state, created_at, updated_at)
    SELECT id, action, spec, actor, reason, cursor_id, moved, refused, state, created_at, updated_at FROM dlq_operations;
DROP TABLE dlq_operations;
ALTER TABLE dlq_operations_next RENAME TO dlq_operations;
