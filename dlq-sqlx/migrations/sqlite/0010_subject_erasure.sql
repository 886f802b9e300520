-- Erasure by data subject (as migrations/postgres/0022 and 0023): the keyed hash of a row's
-- subject, its index, and the record of each erasure. Not in dlq_audit: its entries belong to
-- a row, and an erasure deletes the row with them.
ALTER TABLE dlq_events ADD COLUMN subject TEXT;
CREATE INDEX dlq_events_subject ON dlq_events (subject) WHERE subject IS NOT NULL;

CREATE TABLE dlq_erasures (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    subject_prefix  TEXT    NOT NULL,
    erased_rows     INTEGER NOT NULL,
    erased_attempts INTEGER NOT NULL,
    erased_audit    INTEGER NOT NULL,
    actor           TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    at              INTEGER NOT NULL
);
