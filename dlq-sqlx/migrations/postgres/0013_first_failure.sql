-- The original failure (attempt 0 of a row's history) kept on the row when a retry first
-- replaces the row's error, instead of copied to dlq_attempts.
--
-- Until now the settlement that first replaced a row's error wrote two history rows: the
-- original failure (attempt 0) and the attempt that just failed. The same UPDATE now keeps
-- the original's class and reason in these two columns (its time is first_failed_at), so a
-- retry writes one history row, the first as every later one. NULL until the row's error is
-- first replaced; adding them rewrites nothing. Rows whose attempt 0 an earlier version
-- copied to dlq_attempts keep first_failure_logged = true and these columns NULL.
ALTER TABLE dlq_events
    ADD COLUMN first_error_class  TEXT,
    ADD COLUMN first_error_reason TEXT;

-- The whole attempt history of every row (as 0004), attempt 0 from the row itself unless an
-- earlier version copied it to dlq_attempts.
CREATE OR REPLACE VIEW dlq_history AS
SELECT id AS dlq_id, 0 AS attempt, 'failed'::text AS outcome, coalesce(first_error_class, error_class) AS error_class,
    coalesce(first_error_reason, error_reason) AS error_reason, NULL::text AS owner, first_failed_at AS at
FROM dlq_events
WHERE NOT first_failure_logged
UNION ALL
SELECT dlq_id, attempt, outcome, error_class, error_reason, owner, at
FROM dlq_attempts
UNION ALL
SELECT id, retry_count + 1, 'succeeded', NULL, NULL, lease_owner, updated_at
FROM dlq_events AS e
WHERE status = 'SUCCEEDED'
  AND NOT EXISTS (SELECT 1 FROM dlq_attempts AS a WHERE a.dlq_id = e.id AND a.outcome = 'succeeded');
