-- no-transaction
-- The version of the event's contract each row's payload is written in: the handler's
-- `#[dead_letter(version = N)]` when it parked the row. A retrier upcasts a payload from its
-- row's version to its handler's before decoding it. Rows parked before versions existed were
-- written by version 1 of their handler. SQLite adds a column with a constant default without
-- rewriting the table.
--
-- A retry that succeeded on an upcast payload, or `dlq upgrade`, rewrites the row's payload in
-- its handler's version and records it in the audit log as an `upgrade`. The action list is
-- the one every release widening this check agrees on, so migrations that widen it commute.
-- SQLite cannot alter a CHECK, so dlq_audit is rebuilt (SQLite's documented procedure, as in
-- migration 0006: foreign keys off, copy into a new table, drop, rename, rebuild the index,
-- check, all in one transaction).
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

ALTER TABLE dlq_events ADD COLUMN version INTEGER NOT NULL DEFAULT 1 CHECK (version >= 1);

CREATE TABLE dlq_audit_new (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    dlq_id  INTEGER NOT NULL REFERENCES dlq_events (id) ON DELETE CASCADE,
    action  TEXT    NOT NULL
        CHECK (action IN ('redrive', 'patch', 'discard', 'upgrade', 'rekey', 'erase', 'reveal')),
    actor   TEXT    NOT NULL,
    diff    TEXT    NOT NULL CHECK (json_valid(diff)),
    at      INTEGER NOT NULL,
    reason  TEXT
);

INSERT INTO dlq_audit_new (id, dlq_id, action, actor, diff, at, reason)
    SELECT id, dlq_id, action, actor, diff, at, reason FROM dlq_audit;
DROP TABLE dlq_audit;
ALTER TABLE dlq_audit_new RENAME TO dlq_audit;
CREATE INDEX dlq_audit_dlq_id ON dlq_audit (dlq_id, id);

PRAGMA foreign_key_check;
COMMIT;
PRAGMA foreign_keys = ON;
