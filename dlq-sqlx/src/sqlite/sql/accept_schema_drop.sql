-- Drops the other schemas of type ?1's version ?2 than the shape ?3 (migration 0015): the
-- first step of accept_schema, which then keeps that shape (publish_schemas.sql).
DELETE FROM dlq_type_schemas WHERE event_type = ?1 AND version = ?2 AND digest <> ?3
