-- Rows by event type and status, with the oldest due retry_after of PENDING rows (how long
-- the oldest due row has waited).
SELECT event_type, status, count(*) AS count,
       min(retry_after) FILTER (WHERE status = 'PENDING' AND retry_after <= now()) AS oldest_due
FROM {schema}.dlq_events GROUP BY event_type, status
