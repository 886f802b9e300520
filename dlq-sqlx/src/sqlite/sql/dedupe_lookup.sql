-- The live row (not SUCCEEDED or DISCARDED) holding event type ?1's dedupe key ?2 (migration
-- 0006), after park.sql inserted nothing. The write lock is held since BEGIN IMMEDIATE: the
-- conflicting live row is still live.
SELECT id FROM dlq_events
WHERE event_type = ?1 AND dedupe_key = ?2
    AND dedupe_key IS NOT NULL AND status NOT IN ('SUCCEEDED', 'DISCARDED')
