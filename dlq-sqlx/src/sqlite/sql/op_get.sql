-- Bulk operation ?1, with its cursor and counts.
SELECT id, action, spec, actor, reason, cursor_id, moved, refused, state, created_at, updated_at
FROM dlq_operations WHERE id = ?1
