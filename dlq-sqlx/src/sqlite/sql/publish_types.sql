-- Writes one record of the type catalog (migration 0011). A record replaces the stored one of
-- its type when its version is the same or newer: the newest version wins.
INSERT INTO dlq_event_types AS stored
    (event_type, version, json_schema, older_schemas, upcast_from, encrypted, redact, published_at, published_by)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
ON CONFLICT (event_type) DO UPDATE SET
    version = excluded.version, json_schema = excluded.json_schema, older_schemas = excluded.older_schemas,
    upcast_from = excluded.upcast_from, encrypted = excluded.encrypted, redact = excluded.redact,
    published_at = excluded.published_at, published_by = excluded.published_by
WHERE stored.version <= excluded.version
