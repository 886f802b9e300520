-- Redrives rows already locked and checked (action_lock.sql): PENDING, due now, retry count
-- reset, redrive count + 1; audits each with actor $2 and reason $3; wakes retriers ($4).
WITH moved AS (
    UPDATE {schema}.dlq_events SET
        status = 'PENDING',
        retry_after = now(),
        retry_count = 0,
        dead_reason = NULL,
        redrive_count = redrive_count + 1,
        updated_at = now()
    WHERE id = ANY($1::int8[])
    RETURNING id
),
audited AS (
    INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff, reason)
    SELECT id, 'redrive', $2, jsonb_build_object('status', jsonb_build_array('FAILED_PERMANENTLY', 'PENDING')), $3
    FROM moved
),
wake AS (
    SELECT pg_notify($4, '') FROM (SELECT 1 FROM moved LIMIT 1) AS any_moved
)
SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM wake) AS woken
