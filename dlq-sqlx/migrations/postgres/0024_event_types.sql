-- The type catalog: what the processes handling each event type publish about it when they
-- start (a retrier does), so that tools without the handlers' code (the stock `dlq` binary,
-- the console) can check stored payloads: the version its handler decodes, the oldest version
-- its upcast chain reaches, the JSON Schemas of its event by version when the type exports
-- them, whether it is encrypted and which fields are redacted. One row per event type; the
-- newest version wins (publish_types.sql): a process left on an old version during a rolling
-- deploy does not overwrite the record of the new one.
CREATE TABLE dlq_event_types (
    event_type    TEXT        PRIMARY KEY,
    version       INTEGER     NOT NULL CHECK (version >= 1),
    json_schema   JSONB,
    older_schemas JSONB       NOT NULL DEFAULT '{}',
    upcast_from   INTEGER     NOT NULL CHECK (upcast_from >= 1),
    encrypted     BOOLEAN     NOT NULL,
    redact        JSONB       NOT NULL DEFAULT '[]',
    published_at  TIMESTAMPTZ NOT NULL,
    published_by  TEXT        NOT NULL
);
