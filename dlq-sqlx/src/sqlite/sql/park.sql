-- Parks one letter with attempt 0 to follow (attempt_insert.sql): created_at, updated_at and
-- first_failed_at are all ?24. A live row (not SUCCEEDED or DISCARDED) already holding the
-- event type's dedupe key (migration 0006) makes it insert nothing and return no row; the park
-- then reads that row's id (dedupe_lookup.sql).
INSERT INTO dlq_events (event_type, handler, payload, payload_raw, payload_truncated,
    payload_original_len, payload_sha256, error_class, error_kind, error_reason, error_chain, error_stacktrace,
    fingerprint, status, max_retries, retry_after, dead_reason, dedupe_key, source_topic, source_partition,
    source_offset, source_headers, trace_context, created_at, updated_at, first_failed_at, subject, version)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22,
    ?23, ?24, ?24, ?24, ?25, ?26)
ON CONFLICT (event_type, dedupe_key) WHERE dedupe_key IS NOT NULL AND status NOT IN ('SUCCEEDED', 'DISCARDED')
DO NOTHING
RETURNING id
