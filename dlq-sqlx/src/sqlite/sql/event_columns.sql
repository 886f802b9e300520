-- The columns of dlq_events that codec::letter reads, for SELECT and RETURNING.
id, event_type, handler, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256,
    error_class, error_kind, error_reason, error_chain, error_stacktrace, fingerprint, status, retry_count,
    max_retries, retry_after, dead_reason, lease_owner, lease_until, dedupe_key, source_topic,
    source_partition, source_offset, source_headers, trace_context, redrive_count, created_at, updated_at,
    first_failed_at, last_attempt_at, version
