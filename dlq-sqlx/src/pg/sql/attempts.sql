-- A row's history, oldest first. Two attempts live in the row itself: attempt 0 (the original
-- failure: the row's error until a retry replaces it, then first_error_class and
-- first_error_reason, migration 0013; in dlq_attempts where an earlier version copied it,
-- first_failure_logged), and the final success of a SUCCEEDED row, unless a copy of it is in
-- dlq_attempts.
SELECT id AS dlq_id, 0 AS attempt, 'failed' AS outcome, coalesce(first_error_class, error_class) AS error_class,
    coalesce(first_error_reason, error_reason) AS error_reason, NULL::text AS owner,
    first_failed_at AS at, 0 AS k, 0::int8 AS seq
FROM {schema}.dlq_events
WHERE id = $1 AND NOT first_failure_logged
UNION ALL
SELECT dlq_id, attempt, outcome, error_class, error_reason, owner, at, 1, id
FROM {schema}.dlq_attempts
WHERE dlq_id = $1
UNION ALL
SELECT id, retry_count + 1, 'succeeded', NULL, NULL, lease_owner, updated_at, 2, 0
FROM {schema}.dlq_events AS e
WHERE id = $1 AND status = 'SUCCEEDED'
  AND NOT EXISTS (SELECT 1 FROM {schema}.dlq_attempts AS a WHERE a.dlq_id = e.id AND a.outcome = 'succeeded')
ORDER BY k, seq
