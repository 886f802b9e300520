-- Appends an entry to row ?1's audit log: action ?2 by actor ?3 with reason ?6, what changed
-- (?4, JSON text), at ?5.
INSERT INTO dlq_audit (dlq_id, action, actor, diff, at, reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
