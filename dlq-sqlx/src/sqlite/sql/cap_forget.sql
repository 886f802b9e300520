-- Forgets type ?1's capped claims at or before ?2, the start of the cap's window: they no
-- longer count (migration 0005). Run before cap_record.sql, when a claim under a cap with a
-- window took rows.
DELETE FROM dlq_starts WHERE event_type = ?1 AND at <= ?2
