-- Whether row ?1 exists, read in the reveal's write transaction before its audit entry
-- (Admin::reveal): no row, no entry.
SELECT 1 FROM dlq_events WHERE id = ?1
