-- The first delete of an erasure (migration 0010): the attempt history of every row stored
-- under the subject hash ?1, whatever its status. History goes first, while the rows' ids can
-- still be found by their subject.
DELETE FROM dlq_attempts WHERE dlq_id IN (SELECT id FROM dlq_events WHERE subject = ?1)
