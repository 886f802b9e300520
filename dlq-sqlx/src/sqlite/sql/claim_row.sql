-- Claims row ?1 for retrier ?2 until ?3 with the fresh lease token ?4 at ?5, returning the
-- whole row.
UPDATE dlq_events SET status = 'PROCESSING', lease_owner = ?2, lease_until = ?3, lease_token = ?4,
    last_attempt_at = ?5, updated_at = ?5
WHERE id = ?1
RETURNING {event_columns}
