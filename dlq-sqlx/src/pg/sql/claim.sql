-- Claims due rows for the given event types: PENDING rows whose retry_after passed, and
-- PROCESSING rows whose lease expired (their retrier died or stalled), oldest retry_after
-- first. Each branch walks its own partial index in order: the PENDING branch through
-- dlq_claim_pending() (migration 0007), whose plan is that ordered walk with or without table
-- statistics, so a claim right after a burst of parks reads `limit` rows, not every due one;
-- the event-type test is written as a CASE so that the planner never prefers the
-- (event_type, status) index, which would read every row in flight. SKIP LOCKED lets
-- retriers claim side by side. The new token fences every outcome write of this claim. The
-- batch size is an integer literal ({limit}), not a parameter: with `LIMIT $n` PostgreSQL
-- plans every claim anew instead of caching one plan.
-- The claim commits asynchronously: a claim lost in a server crash only means the row is
-- claimed again (at-least-once), and the outcome's durable commit flushes the claim with it.
-- It changes no tally (rows in flight are tallied as PENDING, migration 0010), and says so to
-- the tally trigger, which then skips its work.
WITH async_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true), set_config('dlq.untallied', 'on', true)
),
pending AS (
    SELECT id, retry_after FROM {schema}.dlq_claim_pending($1::text[], {limit})
),
expired AS (
    SELECT id, retry_after FROM {schema}.dlq_events
    WHERE status = 'PROCESSING' AND lease_until <= now()
      AND CASE WHEN event_type = ANY($1::text[]) THEN true ELSE false END
    ORDER BY retry_after, id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT id FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS d
    ORDER BY retry_after, id
    LIMIT {limit}
)
UPDATE {schema}.dlq_events AS e SET
    status = 'PROCESSING',
    lease_owner = $3,
    lease_until = now() + $2 * INTERVAL '1 microsecond',
    lease_token = gen_random_uuid(),
    last_attempt_at = now(),
    updated_at = now()
FROM due, async_commit
WHERE e.id = due.id
RETURNING e.*
