-- no-transaction
-- The created_at index goes: filters on creation time walk the primary key from
-- dlq_first_id_since (migrations 0051, 0052). A contract migration: the previous release's
-- lists and charts by creation time know no other way than that index, and would read the
-- whole table without it. Dropped CONCURRENTLY, so that parks and claims go on meanwhile; that
-- cannot run inside a transaction or beside another statement, hence one statement in this
-- file.
DROP INDEX CONCURRENTLY IF EXISTS dlq_events_created_at;
