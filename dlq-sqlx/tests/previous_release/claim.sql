-- The previous release's claim: captured by scripts/release-statements.sh from what it
-- sent to the server; prepared for schema `dlq` and run with the parameters it sent.
PREPARE previous_claim AS
-- Claims up to 3 due rows for the given event types ($1), leased for $2 microseconds
-- to $3, pending rows from the floor $4 (the CTEs are claim_rows.sql).
-- The claim commits asynchronously: a claim lost in a server crash only means the row is
-- claimed again (at-least-once), and the outcome's durable commit flushes the claim with it.
-- It changes no tally (rows in flight are tallied as PENDING, migration 0010), and says so to
-- the tally trigger, which then skips its work.
WITH async_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true), set_config('dlq.untallied', 'on', true)
),
-- The claim's CTEs, shared by claim.sql and the statements that write a batch's outcomes and
-- claim the next one (settle_claim.sql). $1, $2, $3, $4 are the event types, the
-- lease in microseconds, the owner and the PENDING branch's floors (migrations 0031, 0033:
-- one per event type, the retry_after it starts from, NULL for the oldest); the including
-- statement numbers them.
-- Due rows: PENDING rows whose retry_after passed, and PROCESSING rows whose lease expired
-- (their retrier died or stalled). Each branch walks its own partial index in order: the
-- PENDING branch through dlq_claim_due() (migration 0033), each type's due rows oldest first,
-- each type an equal share of the batch, whose plan is that ordered walk with or without table
-- statistics, so a claim right after a burst of parks reads `limit` rows, not every due one;
-- the expired branch oldest retry_after first. Of both, each type's rows are ranked oldest
-- first, and the claim takes them rank by rank (`ClaimRequest::share`'s rule); the event-type
-- test of the expired branch is written as a
-- CASE so that the planner never prefers the (event_type, status) index, which would read
-- every row in flight. SKIP LOCKED lets retriers claim side by side. The new token fences
-- every outcome write of this claim. It returns only the columns a retry reads (dlq_core's
-- `Claimed`), not the error and source metadata it never reads. The batch size is an integer
-- literal (3), not a parameter: with `LIMIT $n` PostgreSQL plans every claim anew
-- instead of caching one plan.
pending AS (
    SELECT id, retry_after, event_type FROM "dlq".dlq_claim_due($1::text[], 3, $4::timestamptz[])
),
expired AS (
    SELECT id, retry_after, event_type FROM "dlq".dlq_events
    WHERE status = 'PROCESSING' AND lease_until <= now()
      AND CASE WHEN event_type = ANY($1::text[]) THEN true ELSE false END
    ORDER BY retry_after, id
    LIMIT 3
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT id FROM (
        SELECT id, retry_after, row_number() OVER (PARTITION BY event_type ORDER BY retry_after, id) AS rank
        FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS d
    ) AS r
    ORDER BY rank, retry_after, id
    LIMIT 3
),
claimed AS (
    UPDATE "dlq".dlq_events AS e SET
        status = 'PROCESSING',
        lease_owner = $3,
        lease_until = now() + $2 * INTERVAL '1 microsecond',
        lease_token = gen_random_uuid(),
        last_attempt_at = now(),
        updated_at = now()
    FROM due
    WHERE e.id = due.id
    RETURNING e.id, e.event_type, e.payload, e.payload_raw, e.payload_truncated, e.payload_original_len,
        e.payload_sha256, e.version, e.retry_count, e.max_retries, e.retry_after, e.first_failed_at,
        e.trace_context, e.lease_token
)
SELECT claimed.* FROM claimed, async_commit;
EXECUTE previous_claim('{payment}', '60000000', 'host:1:old', '{NULL}');
