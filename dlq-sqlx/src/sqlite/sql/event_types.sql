-- The type catalog (migration 0011), by event type.
SELECT event_type, version, json_schema, older_schemas, upcast_from, encrypted, redact, published_at, published_by
FROM dlq_event_types ORDER BY event_type
