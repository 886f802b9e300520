-- Writes records of the type catalog (migration 0024): $1 is a JSON array of them, one per
-- event type. A record replaces the stored one of its type when its version is the same or
-- newer: the newest version wins.
INSERT INTO {schema}.dlq_event_types AS stored
    (event_type, version, json_schema, older_schemas, upcast_from, encrypted, redact, published_at, published_by)
SELECT t.event_type, t.version, t.json_schema, t.older_schemas, t.upcast_from, t.encrypted, t.redact,
       t.published_at, t.published_by
FROM jsonb_to_recordset($1) AS t(
    event_type TEXT, version INTEGER, json_schema JSONB, older_schemas JSONB, upcast_from INTEGER,
    encrypted BOOLEAN, redact JSONB, published_at TIMESTAMPTZ, published_by TEXT)
ON CONFLICT (event_type) DO UPDATE SET
    version = EXCLUDED.version, json_schema = EXCLUDED.json_schema,
    older_schemas = EXCLUDED.older_schemas, upcast_from = EXCLUDED.upcast_from,
    encrypted = EXCLUDED.encrypted, redact = EXCLUDED.redact,
    published_at = EXCLUDED.published_at, published_by = EXCLUDED.published_by
WHERE stored.version <= EXCLUDED.version
