-- Rows by event type and status, with each group's oldest due retry_after of PENDING rows
-- (how long the oldest due row has waited); ?1 is now, in unix microseconds like every stored
-- time.
SELECT event_type, status, count(*),
    min(CASE WHEN status = 'PENDING' AND retry_after <= ?1 THEN retry_after END)
FROM dlq_events GROUP BY event_type, status
