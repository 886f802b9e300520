-- The last ?2 circuit changes, newest first, of type ?1 (or of all when NULL).
SELECT event_type, from_state, to_state, reason, actor, at FROM dlq_circuit_log
WHERE ?1 IS NULL OR event_type = ?1
ORDER BY id DESC LIMIT ?2
