-- The release each retrier runs, as the number of that release's first migration
-- (`RELEASE_FIRST_MIGRATION` in dlq-sqlx): `dlq migrate --contract` waits while a retrier of
-- an older release still heartbeats. NULL for a retrier of a release from before this column,
-- whose heartbeat does not name it. Nullable without a default: adding it rewrites nothing.
ALTER TABLE dlq_retriers ADD COLUMN release_migration INTEGER;

COMMENT ON COLUMN dlq_retriers.release_migration IS
    'dlq: the first migration of the release the retrier runs; NULL: a release older than migration 0037';
