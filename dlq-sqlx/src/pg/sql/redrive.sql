-- Moves matching FAILED_PERMANENTLY rows back to PENDING, due now, retry count reset,
-- redrive count + 1; audits each and wakes retriers. Newest first, at most $5 rows. A row
-- whose payload was cut to the size limit cannot succeed and is left alone (patch it first).
WITH target AS (
    SELECT id, status FROM {schema}.dlq_events
    WHERE status = 'FAILED_PERMANENTLY' AND NOT payload_truncated
      AND {filter}
    ORDER BY id DESC
    LIMIT $5
    FOR UPDATE
),
moved AS (
    UPDATE {schema}.dlq_events AS e SET
        status = 'PENDING',
        retry_after = now(),
        retry_count = 0,
        dead_reason = NULL,
        redrive_count = e.redrive_count + 1,
        updated_at = now()
    FROM target t
    WHERE e.id = t.id
    RETURNING e.id, t.status AS previous
),
audited AS (
    INSERT INTO {schema}.dlq_audit (dlq_id, action, actor, diff)
    SELECT id, 'redrive', $12, jsonb_build_object('status', jsonb_build_array(previous, 'PENDING'))
    FROM moved
),
wake AS (
    SELECT pg_notify($13, '') FROM (SELECT 1 FROM moved LIMIT 1) AS any_moved
)
SELECT id, (SELECT count(*) FROM wake) AS woken FROM moved ORDER BY id DESC
