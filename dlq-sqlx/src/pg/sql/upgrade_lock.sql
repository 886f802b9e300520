-- Locks a row for a rewrite of its payload in a newer version (upgrade.rs), reading what the
-- rewrite checks and the payload it replaces.
SELECT status, version, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256
FROM {schema}.dlq_events WHERE id = $1 FOR UPDATE
