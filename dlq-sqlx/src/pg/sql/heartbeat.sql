-- Registers or refreshes a running retrier, and removes the rows of retriers that stopped
-- beating $6 microseconds ago or more (killed, crashed, their host gone): one statement. $7 is
-- the first migration of the release the retrier runs (migration 0037).
WITH expired AS (
    DELETE FROM {schema}.dlq_retriers
    WHERE owner <> $1 AND last_seen < now() - $6 * INTERVAL '1 microsecond'
)
INSERT INTO {schema}.dlq_retriers (owner, host, pid, event_types, singleton, release_migration)
VALUES ($1, $2, $3, $4, $5, $7)
ON CONFLICT (owner) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, event_types = EXCLUDED.event_types,
    singleton = EXCLUDED.singleton, release_migration = EXCLUDED.release_migration, last_seen = now()
