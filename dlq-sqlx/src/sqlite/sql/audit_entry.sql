-- One audit entry by its id ?1.
SELECT id, dlq_id, action, actor, reason, diff, at FROM dlq_audit WHERE id = ?1
