-- Every JSON Schema each version of an event type was published with (the type catalog of
-- migration 0024 keeps one record per type, the newest version's): one row per type, version
-- and shape (digest: SHA-256 of the schema without its annotations). The first published is
-- the version's contract; a retrier whose event has another shape under the same version (a
-- changed event without a version bump) refuses to start, and `dlq redrive --validate` reports
-- it. Written by publish_types.sql's publication, replaced by accept_schema.
CREATE TABLE dlq_type_schemas (
    event_type         TEXT        NOT NULL,
    version            INTEGER     NOT NULL CHECK (version >= 1),
    digest             TEXT        NOT NULL,
    json_schema        JSONB       NOT NULL,
    first_published_at TIMESTAMPTZ NOT NULL,
    published_at       TIMESTAMPTZ NOT NULL,
    published_by       TEXT        NOT NULL,
    PRIMARY KEY (event_type, version, digest)
);
