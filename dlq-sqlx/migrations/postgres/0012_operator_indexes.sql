-- Finished and in-flight rows out of the operators' indexes (issue 12).
--
-- A drained row is updated twice, claimed (PROCESSING) and then settled (SUCCEEDED), and
-- neither update can be HOT (status is indexed), so each one added an entry to every index
-- of the table: ten index entries per drained row, four of them in these two indexes. They
-- serve what an operator lists, groups and acts on: the rows waiting for a retry, the dead and
-- the discarded. Rows in flight are few and found by dlq_events_lease_expiry; succeeded rows
-- are read by primary key (the console's lists, newest first). Without them a drain writes
-- six index entries per row instead of ten, and the two indexes hold only the rows an
-- operator works on (a table of succeeded history no longer grows them).
--
-- What a query must do to use them: name a status in the set (the console's filtered lists,
-- the failure groups, bulk actions on dead rows). A list of one event type or failure group
-- across every status walks the primary key newest first instead: quick when the type or
-- group is common in the table, a longer walk when it is rare among succeeded rows.
--
-- On a large existing table this builds two indexes while holding off writes to dlq_events.
DROP INDEX dlq_events_type_status_id;
CREATE INDEX dlq_events_type_status_id ON dlq_events (event_type, status, id)
    WHERE status IN ('PENDING', 'FAILED_PERMANENTLY', 'DISCARDED');
DROP INDEX dlq_events_fingerprint_id;
CREATE INDEX dlq_events_fingerprint_id ON dlq_events (fingerprint, id)
    WHERE status IN ('PENDING', 'FAILED_PERMANENTLY', 'DISCARDED');
