SELECT status, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256 FROM {schema}.dlq_events WHERE id = $1 FOR UPDATE
