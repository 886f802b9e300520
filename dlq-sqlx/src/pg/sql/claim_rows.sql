-- The claim's CTEs, shared by claim.sql and the statements that write a batch's outcomes and
-- claim the next one (settle_claim.sql). {p1}, {p2}, {p3}, {p4} are the event types, the
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
-- literal ({limit}), not a parameter: with `LIMIT $n` PostgreSQL plans every claim anew
-- instead of caching one plan.
pending AS (
    SELECT id, retry_after, event_type FROM {schema}.dlq_claim_due({p1}::text[], {limit}, {p4}::timestamptz[])
),
expired AS (
    SELECT id, retry_after, event_type FROM {schema}.dlq_events
    WHERE status = 'PROCESSING' AND lease_until <= now()
      AND CASE WHEN event_type = ANY({p1}::text[]) THEN true ELSE false END
    ORDER BY retry_after, id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT id FROM (
        SELECT id, retry_after, row_number() OVER (PARTITION BY event_type ORDER BY retry_after, id) AS rank
        FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS d
    ) AS r
    ORDER BY rank, retry_after, id
    LIMIT {limit}
),
claimed AS (
    UPDATE {schema}.dlq_events AS e SET
        status = 'PROCESSING',
        lease_owner = {p3},
        lease_until = now() + {p2} * INTERVAL '1 microsecond',
        lease_token = gen_random_uuid(),
        last_attempt_at = now(),
        updated_at = now()
    FROM due
    WHERE e.id = due.id
    RETURNING e.id, e.event_type, e.payload, e.payload_raw, e.payload_truncated, e.payload_original_len,
        e.payload_sha256, e.version, e.retry_count, e.max_retries, e.retry_after, e.first_failed_at,
        e.trace_context, e.lease_token
)
