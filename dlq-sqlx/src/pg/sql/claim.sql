-- Claims up to {limit} due rows for the given event types ($1), leased for $2 microseconds
-- to $3, pending rows from the floor $4 (the CTEs are claim_rows.sql).
-- The claim commits asynchronously: a claim lost in a server crash only means the row is
-- claimed again (at-least-once), and the outcome's durable commit flushes the claim with it.
-- It changes no tally (rows in flight are tallied as PENDING, migration 0010), and says so to
-- the tally trigger, which then skips its work.
WITH async_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true), set_config('dlq.untallied', 'on', true)
),
{claim_rows}
SELECT claimed.* FROM claimed, async_commit
