-- no-transaction
-- `dlq_events_type_due` (migration 0032) serves every walk `dlq_events_pending_due` served,
-- one event type at a time (migration 0033); one B-tree fewer for every park to enter.
-- Dropped CONCURRENTLY, so no statement on the table waits for it. A retrier of the previous
-- release claims through the functions migration 0033 rewrote; its `dlq stats` finds each
-- type's oldest due row by a slower plan until it is upgraded.
DROP INDEX CONCURRENTLY IF EXISTS dlq_events_pending_due;
