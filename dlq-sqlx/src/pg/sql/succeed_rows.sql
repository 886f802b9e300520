-- The CTEs of succeed.sql, shared with settle_claim.sql (parameters $1 and $2; see succeed.sql).
-- outcome_commit: how the statement commits (PgConfig::durable_outcomes; the statement must
-- read it for it to run).
outcome_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', {outcome_commit}, true) AS synchronous_commit
),
settled AS (
    UPDATE {schema}.dlq_events AS e SET
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
