-- Replaces row ?1's payload (the five payload columns, ?2 to ?6, as codec::PayloadColumns
-- binds them) at ?7; the audit entry is written beside it (audit_insert.sql).
UPDATE dlq_events SET payload = ?2, payload_raw = ?3, payload_truncated = ?4,
    payload_original_len = ?5, payload_sha256 = ?6, updated_at = ?7
WHERE id = ?1
