-- The newest ?1 erasure records.
SELECT id, subject_prefix, erased_rows, erased_attempts, erased_audit, actor, reason, at
FROM dlq_erasures ORDER BY id DESC LIMIT ?1
