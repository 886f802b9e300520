-- Every JSON Schema each version of an event type was published with (as
-- migrations/postgres/0036): one row per type, version and shape; the first published is the
-- version's contract. JSON as text; times are microseconds since the epoch.
CREATE TABLE dlq_type_schemas (
    event_type         TEXT    NOT NULL,
    version            INTEGER NOT NULL CHECK (version >= 1),
    digest             TEXT    NOT NULL,
    json_schema        TEXT    NOT NULL,
    first_published_at INTEGER NOT NULL,
    published_at       INTEGER NOT NULL,
    published_by       TEXT    NOT NULL,
    PRIMARY KEY (event_type, version, digest)
);
