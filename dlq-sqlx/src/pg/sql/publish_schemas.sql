-- Keeps the JSON Schemas of published records by version (migration 0036): $1 is a JSON array
-- of them, one per type, version and shape. A shape new to its version is added; a known one
-- keeps its first publication and takes the new time and publisher.
INSERT INTO {schema}.dlq_type_schemas AS stored
    (event_type, version, digest, json_schema, first_published_at, published_at, published_by)
SELECT t.event_type, t.version, t.digest, t.json_schema, t.published_at, t.published_at, t.published_by
FROM jsonb_to_recordset($1) AS t(
    event_type TEXT, version INTEGER, digest TEXT, json_schema JSONB, published_at TIMESTAMPTZ, published_by TEXT)
ON CONFLICT (event_type, version, digest) DO UPDATE SET
    published_at = EXCLUDED.published_at, published_by = EXCLUDED.published_by
