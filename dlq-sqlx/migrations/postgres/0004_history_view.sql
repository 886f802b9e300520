-- The whole attempt history of every row, for plain SQL: what `PgStore::attempts` returns
-- for one row. Two attempts live in the row itself until something would overwrite them
-- (attempt 0, the original failure, and the final success); the view adds them back.
CREATE VIEW dlq_history AS
SELECT id AS dlq_id, 0 AS attempt, 'failed'::text AS outcome, error_class, error_reason, NULL::text AS owner,
    first_failed_at AS at
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
