-- Discards rows already locked and checked (action_lock.sql), auditing each with its
-- previous status, actor $2 and reason $3. A SUCCEEDED row's success lives in the row (see
-- attempts.sql): it is written to the history before the row leaves SUCCEEDED.
WITH target AS (
    SELECT id, status, retry_count, lease_owner, updated_at FROM {schema}.dlq_events
    WHERE id = ANY($1::int8[])
),
moved AS (
    UPDATE {schema}.dlq_events AS e SET status = 'DISCARDED', updated_at = now()
    FROM target t
    WHERE e.id = t.id
    RETURNING e.id, t.status AS previous
),
success AS (
    INSERT INTO {schema}.dlq_attempts (dlq_id, attempt, outcome, owner, at)
    SELECT t.id, t.retry_count + 1, 'succeeded', t.lease_owner, t.updated_at
    FROM target AS t
    WHERE t.status = 'SUCCEEDED'
      AND NOT EXISTS (SELECT 1 FROM {schema}.dlq_attempts AS a WHERE a.dlq_id = t.id AND a.outcome = 'succeeded')
)
INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff, reason)
SELECT id, 'discard', $2, jsonb_build_object('status', jsonb_build_array(previous, 'DISCARDED')), $3
FROM moved
