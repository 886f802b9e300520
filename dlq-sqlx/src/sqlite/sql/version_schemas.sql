-- The JSON Schemas each version was published with (migration 0015), by type, version, then
-- first publication.
SELECT event_type, version, digest, json_schema, first_published_at, published_at, published_by
FROM dlq_type_schemas ORDER BY event_type, version, first_published_at, digest
