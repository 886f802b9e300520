-- The rows stored under the subject hash ?1, whatever their status (migration 0010's index).
SELECT count(*) FROM dlq_events WHERE subject = ?1
