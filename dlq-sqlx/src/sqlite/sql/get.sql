-- One row by id ?1, whole: for a read, and in the write transaction of a patch or an upgrade,
-- which check the row before they write it.
SELECT {event_columns}
FROM dlq_events WHERE id = ?1
