-- Appends attempt ?2 to row ?1's history: its outcome ?3, the failure's class ?4 and reason
-- ?5 (NULL for a success), the retrier ?6 (NULL for the park's attempt 0), at ?7.
INSERT INTO dlq_attempts (dlq_id, attempt, outcome, error_class, error_reason, owner, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
