-- Discards rows already locked and checked (action_lock.sql: PENDING or FAILED_PERMANENTLY
-- only), auditing each with its previous status, actor $2 and reason $3.
WITH moved AS (
    UPDATE {schema}.dlq_events AS e SET status = 'DISCARDED', updated_at = now()
    FROM (SELECT id, status FROM {schema}.dlq_events WHERE id = ANY($1::int8[])) AS t
    WHERE e.id = t.id
    RETURNING e.id, t.status AS previous
)
INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff, reason)
SELECT id, 'discard', $2, jsonb_build_object('status', jsonb_build_array(previous, 'DISCARDED')), $3
FROM moved
