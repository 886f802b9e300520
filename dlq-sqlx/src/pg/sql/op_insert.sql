INSERT INTO {schema}.dlq_operations (action, spec, actor, reason)
VALUES ($1, $2, $3, $4)
RETURNING id, action, spec, actor, reason, cursor_id, moved, refused, state, created_at, updated_at
