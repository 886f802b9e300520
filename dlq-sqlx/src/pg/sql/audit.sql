SELECT id, dlq_id, action, actor, reason, diff, at FROM {schema}.dlq_audit WHERE dlq_id = $1 ORDER BY id
