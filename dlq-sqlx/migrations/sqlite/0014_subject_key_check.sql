-- The check value of the subject key (as migrations/postgres/0035): the first key to hash a
-- subject leaves it; an erasure with another key is refused. One row at most; created_at is
-- microseconds since the epoch, as every time column here.
CREATE TABLE dlq_subject_key (
    only_row   INTEGER PRIMARY KEY CHECK (only_row = 1),
    key_check  TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
