-- The type catalog (as migrations/postgres/0024): one row per event type, published by the
-- processes that handle it; the newest version wins. JSON columns hold JSON text;
-- published_at is microseconds since the epoch, as every time column here.
CREATE TABLE dlq_event_types (
    event_type    TEXT    PRIMARY KEY,
    version       INTEGER NOT NULL CHECK (version >= 1),
    json_schema   TEXT,
    older_schemas TEXT    NOT NULL DEFAULT '{}',
    upcast_from   INTEGER NOT NULL CHECK (upcast_from >= 1),
    encrypted     INTEGER NOT NULL,
    redact        TEXT    NOT NULL DEFAULT '[]',
    published_at  INTEGER NOT NULL,
    published_by  TEXT    NOT NULL
);
