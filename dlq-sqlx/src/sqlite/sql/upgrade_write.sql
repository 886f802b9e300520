-- Rewrites row ?1's payload (?2 to ?6, as codec::PayloadColumns binds them) in the newer
-- version ?7 of its contract (migration 0008). The row's status and updated_at stay: a
-- SUCCEEDED row's success keeps its time.
UPDATE dlq_events SET payload = ?2, payload_raw = ?3, payload_truncated = ?4,
    payload_original_len = ?5, payload_sha256 = ?6, version = ?7
WHERE id = ?1
