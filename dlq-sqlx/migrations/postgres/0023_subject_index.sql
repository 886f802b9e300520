-- no-transaction
-- The rows of one subject, for erasure (migration 0022). Only rows parked with a subject are
-- in it. Built CONCURRENTLY, so parks and claims go on while it is built on a large table;
-- that cannot run inside a transaction or beside another statement, hence one statement in
-- this file. `dlq_sqlx::postgres::migrate` drops an INVALID leftover of an interrupted build
-- before it runs this file again.
CREATE INDEX CONCURRENTLY dlq_events_subject ON dlq_events (subject) WHERE subject IS NOT NULL;
