-- The previous release's succeed: captured by scripts/release-statements.sh from what it
-- sent to the server; prepared for schema `dlq` and run with the parameters it sent.
-- The claimed rows hold the lease tokens they held at capture (a claim draws new ones).
UPDATE dlq.dlq_events AS e SET lease_token = t.token FROM unnest('{1}'::int8[], '{8239d860-73b3-4a57-887b-479ce5ebd3e2}'::uuid[]) AS t(id, token) WHERE e.id = t.id;
PREPARE previous_succeed AS
-- The common outcome on its own, as lean as the bare transition: rows whose lease the token
-- still holds become SUCCEEDED. Ids missing from the result were fenced. The success is the
-- row's own last attempt (read by attempts.sql; written to dlq_attempts only if an operator
-- later patches or discards the row), so nothing else is written.
WITH -- The CTEs of succeed.sql, shared with settle_claim.sql (parameters $1 and $2; see succeed.sql).
-- outcome_commit: how the statement commits (PgConfig::durable_outcomes; the statement must
-- read it for it to run).
outcome_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS synchronous_commit
),
settled AS (
    UPDATE "dlq".dlq_events AS e SET
        status = 'SUCCEEDED',
        lease_until = NULL,
        lease_token = NULL,
        updated_at = now()
    FROM unnest($1::int8[], $2::uuid[]) AS i(id, token)
    WHERE e.id = i.id
      AND e.lease_token = i.token
      -- As in settle.sql: a CASE keeps the planner on the primary key.
      AND CASE WHEN e.status = 'PROCESSING' THEN e.lease_until > now() ELSE false END
    RETURNING e.id, i.token
)
SELECT id, token FROM settled, outcome_commit;
EXECUTE previous_succeed('{1}', '{8239d860-73b3-4a57-887b-479ce5ebd3e2}');
