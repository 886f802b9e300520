-- The previous release's heartbeat: captured by scripts/release-statements.sh from what it
-- sent to the server; prepared for schema `dlq` and run with the parameters it sent.
PREPARE previous_heartbeat AS
-- Registers or refreshes a running retrier, and removes the rows of retriers that stopped
-- beating $6 microseconds ago or more (killed, crashed, their host gone): one statement.
WITH expired AS (
    DELETE FROM "dlq".dlq_retriers
    WHERE owner <> $1 AND last_seen < now() - $6 * INTERVAL '1 microsecond'
)
INSERT INTO "dlq".dlq_retriers (owner, host, pid, event_types, singleton)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (owner) DO UPDATE SET
    host = EXCLUDED.host, pid = EXCLUDED.pid, event_types = EXCLUDED.event_types,
    singleton = EXCLUDED.singleton, last_seen = now();
EXECUTE previous_heartbeat('host:1:old', 'vm', '22006', '{payment}', 'f', '60000000');
