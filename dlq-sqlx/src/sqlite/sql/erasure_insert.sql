-- Records an erasure (migration 0010), in the transaction of its deletes: the subject hash's
-- prefix ?1 (what the record keeps of it), the rows, attempts and audit entries deleted (?2 to ?4),
-- actor ?5 and reason ?6, at ?7.
INSERT INTO dlq_erasures
    (subject_prefix, erased_rows, erased_attempts, erased_audit, actor, reason, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
RETURNING id
