-- Keeps the JSON Schema ?4 that version ?2 of type ?1 was published with, by its shape's
-- digest ?3 (migration 0015). A shape new to its version is added; a known one keeps its first
-- publication and takes the new time ?5 and publisher ?6.
INSERT INTO dlq_type_schemas AS stored
    (event_type, version, digest, json_schema, first_published_at, published_at, published_by)
VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6)
ON CONFLICT (event_type, version, digest) DO UPDATE SET
    published_at = excluded.published_at, published_by = excluded.published_by
