-- Records that an operator was shown a row whole (Admin::reveal): no row, no entry.
INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff, reason)
SELECT id, 'reveal', $2, '{}'::jsonb, $3 FROM {schema}.dlq_events WHERE id = $1
RETURNING id
