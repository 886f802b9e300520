-- The audit log of row ?1, oldest first.
SELECT id, dlq_id, action, actor, reason, diff, at FROM dlq_audit WHERE dlq_id = ?1 ORDER BY id
