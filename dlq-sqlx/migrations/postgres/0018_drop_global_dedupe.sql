-- no-transaction
-- The one-row-per-key-across-every-type index of migration 0001, replaced by
-- dlq_events_live_dedupe (migration 0017). Dropped CONCURRENTLY: parks go on meanwhile.
DROP INDEX CONCURRENTLY IF EXISTS dlq_events_dedupe_key;
