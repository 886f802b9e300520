-- no-transaction
-- The finished rows in (updated_at, id) order, for the purge's slices: each slice starts after
-- the last row of the slice before (purge.sql), also among rows that share one `updated_at`
-- (a bulk redrive or discard stamps thousands with the same instant), instead of stepping over
-- the index entries of every row deleted before it, which stay until a VACUUM. It replaces
-- `dlq_events_finished` (updated_at), dropped by the next migration. Built CONCURRENTLY so that
-- parks and claims go on while it is built on a large table; that cannot run inside a
-- transaction or beside another statement, hence one statement in this file.
CREATE INDEX CONCURRENTLY dlq_events_finished_at ON dlq_events (updated_at, id)
    WHERE status IN ('SUCCEEDED', 'DISCARDED');
