-- The attempt history of row ?1, oldest first (attempt 0 is the original failure, written by
-- the park).
SELECT dlq_id, attempt, outcome, error_class, error_reason, owner, at
FROM dlq_attempts WHERE dlq_id = ?1 ORDER BY id
