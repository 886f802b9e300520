-- Moves matching rows that are neither PROCESSING nor already DISCARDED to DISCARDED,
-- auditing each with its previous status. Newest first, at most $5 rows.
WITH target AS (
    SELECT id, status, retry_count, lease_owner, updated_at FROM {schema}.dlq_events
    WHERE status NOT IN ('PROCESSING', 'DISCARDED')
      AND {filter}
    ORDER BY id DESC
    LIMIT $5
    FOR UPDATE
),
moved AS (
    UPDATE {schema}.dlq_events AS e SET status = 'DISCARDED', updated_at = now()
    FROM target t
    WHERE e.id = t.id
    RETURNING e.id, t.status AS previous
),
-- A SUCCEEDED row's success lives in the row (see attempts.sql): write it to the history
-- before the row leaves SUCCEEDED.
success AS (
    INSERT INTO {schema}.dlq_attempts (dlq_id, attempt, outcome, owner, at)
    SELECT t.id, t.retry_count + 1, 'succeeded', t.lease_owner, t.updated_at
    FROM target AS t
    JOIN moved AS m ON m.id = t.id
    WHERE t.status = 'SUCCEEDED'
      AND NOT EXISTS (SELECT 1 FROM {schema}.dlq_attempts AS a WHERE a.dlq_id = t.id AND a.outcome = 'succeeded')
),
audited AS (
    INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff)
    SELECT id, 'discard', $12, jsonb_build_object('status', jsonb_build_array(previous, 'DISCARDED'))
    FROM moved
)
SELECT id FROM moved ORDER BY id DESC
