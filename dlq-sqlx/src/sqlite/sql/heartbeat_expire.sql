-- Removes the rows of the other retriers (not ?1) that stopped beating before ?2 (killed,
-- crashed, their host gone), in the transaction of a heartbeat (heartbeat.sql).
DELETE FROM dlq_retriers WHERE owner <> ?1 AND last_seen < ?2
