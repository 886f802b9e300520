-- The last delete of an erasure: every row stored under the subject hash ?1, whatever its
-- status, once its history is gone.
DELETE FROM dlq_events WHERE subject = ?1
