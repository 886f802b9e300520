-- Stores a bulk operation (migration 0003): action ?1 over spec ?2 (JSON text) by actor ?3
-- with reason ?4, created at ?5; it starts running, its cursor at 0.
INSERT INTO dlq_operations (action, spec, actor, reason, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?5)
RETURNING id
