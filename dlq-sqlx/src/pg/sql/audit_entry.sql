SELECT id, dlq_id, action, actor, reason, diff, at FROM {schema}.dlq_audit WHERE id = $1
