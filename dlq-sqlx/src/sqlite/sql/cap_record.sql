-- Records a claim of type ?1 under a cap with a window, at ?2, that took ?3 rows (migration
-- 0005): the next capped claims of the type count it within their window (cap_counts.sql).
INSERT INTO dlq_starts (event_type, at, n) VALUES (?1, ?2, ?3)
