-- Finished and in-flight rows out of the operators' indexes.
--
-- A drained row is updated twice, claimed (PROCESSING) and then settled (SUCCEEDED), and
-- neither update can be HOT (status is indexed), so each one added an entry to every index
-- of the table: ten index entries per drained row. Now four.
--
-- The (event_type, status, id) and (fingerprint, id) indexes serve what an operator lists,
-- groups and acts on: the rows waiting for a retry, the dead and the discarded. Rows in flight
-- are few and found by dlq_events_lease_expiry; succeeded rows are read by primary key (the
-- console's lists, newest first). Without them the two indexes hold only the rows an operator
-- works on (a table of succeeded history no longer grows them). A query uses them by naming a
-- status in the set (the console's filtered lists, the failure groups, bulk actions on dead
-- rows); a list of one event type or failure group across every status walks the primary key
-- newest first instead: quick when the type or group is common in the table, a longer walk
-- when it is rare among succeeded rows.
--
-- The created_at index leaves out the rows in flight, so a claim adds no entry to it; the
-- counts of rows created in a window (below, and created_histogram.sql) add those few rows
-- back from the lease index.
--
-- On a large existing table this builds three indexes while holding off writes to dlq_events.
DROP INDEX dlq_events_type_status_id;
CREATE INDEX dlq_events_type_status_id ON dlq_events (event_type, status, id)
    WHERE status IN ('PENDING', 'FAILED_PERMANENTLY', 'DISCARDED');
DROP INDEX dlq_events_fingerprint_id;
CREATE INDEX dlq_events_fingerprint_id ON dlq_events (fingerprint, id)
    WHERE status IN ('PENDING', 'FAILED_PERMANENTLY', 'DISCARDED');
DROP INDEX dlq_events_created_at;
CREATE INDEX dlq_events_created_at ON dlq_events (created_at) WHERE status <> 'PROCESSING';

-- As in 0010, with the rows in flight counted apart (by dlq_events_lease_expiry).
CREATE OR REPLACE FUNCTION dlq_count_created(since timestamptz, until timestamptz, cap bigint)
RETURNS bigint
LANGUAGE sql
STABLE
SET search_path FROM CURRENT
SET enable_seqscan = off
AS $$
    SELECT count(*) FROM (
        SELECT 1 FROM dlq_events
        WHERE status <> 'PROCESSING'
          AND created_at >= coalesce(since, '-infinity') AND created_at < coalesce(until, 'infinity')
        UNION ALL
        SELECT 1 FROM dlq_events
        WHERE status = 'PROCESSING'
          AND created_at >= coalesce(since, '-infinity') AND created_at < coalesce(until, 'infinity')
        LIMIT cap
    ) AS created
$$;
