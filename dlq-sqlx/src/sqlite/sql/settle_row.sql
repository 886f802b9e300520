-- Writes any outcome to row ?1, whose lease was found held (lease_held.sql), and releases the
-- lease: status ?2, ?3 more retries counted, the next retry_after ?4 and dead reason ?10 when
-- given. ?5 (the failure's class) is NULL when the outcome records no failure, and then the
-- failure columns (?5 to ?9, fingerprint ?11) are left as they are.
UPDATE dlq_events SET status = ?2, retry_count = retry_count + ?3,
    retry_after = coalesce(?4, retry_after), dead_reason = coalesce(?10, dead_reason),
    error_class = coalesce(?5, error_class), error_kind = coalesce(?6, error_kind),
    error_reason = coalesce(?7, error_reason), error_chain = coalesce(?8, error_chain),
    error_stacktrace = CASE WHEN ?5 IS NULL THEN error_stacktrace ELSE ?9 END,
    fingerprint = coalesce(?11, fingerprint),
    lease_owner = NULL, lease_until = NULL, lease_token = NULL, updated_at = ?12
WHERE id = ?1
