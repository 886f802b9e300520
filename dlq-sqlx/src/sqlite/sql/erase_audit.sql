-- The second delete of an erasure: the audit log of every row stored under the subject hash
-- ?1 (their rows still stand, see erase_attempts.sql).
DELETE FROM dlq_audit WHERE dlq_id IN (SELECT id FROM dlq_events WHERE subject = ?1)
