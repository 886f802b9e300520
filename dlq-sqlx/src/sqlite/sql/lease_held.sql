-- Whether the lease on row ?1 is held (same token ?2, lease not expired at ?3): an outcome
-- whose lease no longer holds is fenced and writes nothing. The owner and the retry count go
-- into the attempts written with the outcome (attempt_insert.sql).
SELECT lease_owner, retry_count FROM dlq_events
WHERE id = ?1 AND status = 'PROCESSING' AND lease_token = ?2 AND lease_until > ?3
