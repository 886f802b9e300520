-- no-transaction
-- `dlq_events_finished_at` (migration 0027) serves everything `dlq_events_finished` did (its
-- leading column is the same); one index fewer to keep up as rows finish. Dropped
-- CONCURRENTLY, so no statement on the table waits for it.
DROP INDEX CONCURRENTLY IF EXISTS dlq_events_finished;
