SELECT id, action, spec, actor, reason, cursor_id, moved, refused, state, created_at, updated_at
FROM {schema}.dlq_operations
WHERE id = $1
