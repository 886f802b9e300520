-- Redrives rows already read and checked (action_rows.sql; ?1, a JSON array of ids): PENDING,
-- due at ?2, retry count reset, redrive count + 1. Each is audited beside it.
UPDATE dlq_events SET status = 'PENDING', retry_after = ?2, retry_count = 0,
    dead_reason = NULL, redrive_count = redrive_count + 1, updated_at = ?2
WHERE id IN (SELECT value FROM json_each(?1))
