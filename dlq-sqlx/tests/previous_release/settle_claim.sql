-- The previous release's settle_claim: captured by scripts/release-statements.sh from what it
-- sent to the server; prepared for schema `dlq` and run with the parameters it sent.
-- The claimed rows hold the lease tokens they held at capture (a claim draws new ones).
UPDATE dlq.dlq_events AS e SET lease_token = t.token FROM unnest('{3}'::int8[], '{b24d4d29-2d28-4e04-9fc0-f1b834c63036}'::uuid[]) AS t(id, token) WHERE e.id = t.id;
PREPARE previous_settle_claim AS
-- A batch's outcomes written and the next batch claimed in one statement: one round trip and
-- one commit between two batches of a retrier's claim loop. Rendered twice: with
-- succeed_rows.sql for a batch of successes ($1, $2; the claim's parameters from $3) and with
-- settle_rows.sql for any other batch ($1 to $15; the claim's from $16), and the claim's
-- CTEs from claim_rows.sql. The claim never takes a row this statement settles (PostgreSQL
-- does not update a row twice in one statement). It commits as the outcomes do
-- (outcome_commit), and the trigger tallies both changes (the claim's rows net to nothing).
-- One row per claimed row, or one row with a NULL id when nothing was claimed; one row (rank 1)
-- carries the settled ids and tokens (a lease missing from them was fenced).
WITH -- The CTEs of settle.sql, shared with settle_claim.sql (parameters $1 to $15; see settle.sql).
-- outcome_commit: how the statement commits (PgConfig::durable_outcomes; the statement must
-- read it for it to run).
outcome_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true) AS synchronous_commit
),
input AS (
    SELECT * FROM unnest(
        $1::int8[], $2::uuid[], $3::text[], $4::int8[], $5::int4[], $6::text[],
        $7::text[], $8::text[], $9::text[], $10::jsonb[], $11::text[], $12::text[], $15::jsonb[]
    ) AS t(id, token, outcome, delay_us, counts, dead_reason,
           error_class, error_kind, error_reason, error_chain, error_stacktrace, fingerprint, earlier)
),
settled AS (
    UPDATE "dlq".dlq_events AS e SET
        status = CASE i.outcome
            WHEN 'succeeded' THEN 'SUCCEEDED'
            WHEN 'dead' THEN 'FAILED_PERMANENTLY'
            ELSE 'PENDING' END,
        retry_count = e.retry_count + i.counts,
        retry_after = CASE i.outcome
            WHEN 'retry' THEN now() + i.delay_us * INTERVAL '1 microsecond'
            WHEN 'released' THEN now()
            ELSE e.retry_after END,
        dead_reason = CASE WHEN i.outcome = 'dead' THEN i.dead_reason ELSE e.dead_reason END,
        error_class = COALESCE(i.error_class, e.error_class),
        error_kind = CASE WHEN i.error_class IS NULL THEN e.error_kind ELSE i.error_kind END,
        error_reason = CASE WHEN i.error_class IS NULL THEN e.error_reason ELSE i.error_reason END,
        error_chain = CASE WHEN i.error_class IS NULL THEN e.error_chain ELSE i.error_chain END,
        error_stacktrace = CASE WHEN i.error_class IS NULL THEN e.error_stacktrace ELSE i.error_stacktrace END,
        fingerprint = CASE WHEN i.error_class IS NULL THEN e.fingerprint ELSE i.fingerprint END,
        -- The first replacement of the row's error keeps the original (attempt 0 of the
        -- history) on the row (migration 0013); on the right of SET, e.* is the row before.
        first_error_class = CASE WHEN i.error_class IS NULL OR e.first_failure_logged OR e.first_error_class IS NOT NULL
            THEN e.first_error_class ELSE e.error_class END,
        first_error_reason = CASE WHEN i.error_class IS NULL OR e.first_failure_logged OR e.first_error_class IS NOT NULL
            THEN e.first_error_reason ELSE e.error_reason END,
        lease_until = NULL,
        lease_token = NULL,
        updated_at = now()
    FROM input AS i
    WHERE e.id = i.id
      AND e.lease_token = i.token
      -- "PROCESSING with an unexpired lease", written as a CASE so that the planner drives
      -- the update from the input by primary key and never from the lease index, whose
      -- statistics (taken while few rows were in flight) make it look free.
      AND CASE WHEN e.status = 'PROCESSING' THEN e.lease_until > now() ELSE false END
    RETURNING e.id, i.token, i.outcome,
        e.retry_count + 1 - i.counts + coalesce(jsonb_array_length(i.earlier), 0) AS attempt,
        e.lease_owner, i.error_class, i.error_reason, i.earlier
),
-- The final attempt of each outcome but a success (the row is its record) or a release (no
-- attempt), after the earlier attempts of a repeated outcome (`earlier`: their failures, oldest
-- first, each a retry), in attempt order.
history AS (
    INSERT INTO "dlq".dlq_attempts (dlq_id, attempt, outcome, error_class, error_reason, owner, at)
    SELECT id, attempt, outcome, error_class, error_reason, lease_owner, now()
    FROM (
        SELECT id, attempt, outcome, error_class, error_reason, lease_owner
        FROM settled
        WHERE outcome NOT IN ('released', 'succeeded')
        UNION ALL
        SELECT s.id, s.attempt - jsonb_array_length(s.earlier) + x.n::int4 - 1, 'retry',
            x.failure ->> 'class', x.failure ->> 'reason', s.lease_owner
        FROM settled AS s, jsonb_array_elements(s.earlier) WITH ORDINALITY AS x(failure, n)
    ) AS attempts
    ORDER BY id, attempt
),
wake AS (
    SELECT pg_notify($13, '')
    FROM (SELECT 1 FROM settled WHERE outcome IN ('retry', 'released') LIMIT 1) AS any_due
    WHERE $14
),
-- The claim's CTEs, shared by claim.sql and the statements that write a batch's outcomes and
-- claim the next one (settle_claim.sql). $16, $17, $18, $19 are the event types, the
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
-- literal (5), not a parameter: with `LIMIT $n` PostgreSQL plans every claim anew
-- instead of caching one plan.
pending AS (
    SELECT id, retry_after, event_type FROM "dlq".dlq_claim_due($16::text[], 5, $19::timestamptz[])
),
expired AS (
    SELECT id, retry_after, event_type FROM "dlq".dlq_events
    WHERE status = 'PROCESSING' AND lease_until <= now()
      AND CASE WHEN event_type = ANY($16::text[]) THEN true ELSE false END
    ORDER BY retry_after, id
    LIMIT 5
    FOR UPDATE SKIP LOCKED
),
due AS (
    SELECT id FROM (
        SELECT id, retry_after, row_number() OVER (PARTITION BY event_type ORDER BY retry_after, id) AS rank
        FROM (SELECT * FROM pending UNION ALL SELECT * FROM expired) AS d
    ) AS r
    ORDER BY rank, retry_after, id
    LIMIT 5
),
claimed AS (
    UPDATE "dlq".dlq_events AS e SET
        status = 'PROCESSING',
        lease_owner = $18,
        lease_until = now() + $17 * INTERVAL '1 microsecond',
        lease_token = gen_random_uuid(),
        last_attempt_at = now(),
        updated_at = now()
    FROM due
    WHERE e.id = due.id
    RETURNING e.id, e.event_type, e.payload, e.payload_raw, e.payload_truncated, e.payload_original_len,
        e.payload_sha256, e.version, e.retry_count, e.max_retries, e.retry_after, e.first_failed_at,
        e.trace_context, e.lease_token
),
written AS (
    SELECT array_agg(id) AS settled_ids, array_agg(token) AS settled_tokens, (SELECT count(*) FROM wake) AS woken FROM settled
)
SELECT CASE WHEN coalesce(c.claim_rank, 1) = 1 THEN w.settled_ids END AS settled_ids,
    CASE WHEN coalesce(c.claim_rank, 1) = 1 THEN w.settled_tokens END AS settled_tokens,
    w.woken, c.*
FROM written AS w
CROSS JOIN outcome_commit
LEFT JOIN (SELECT claimed.*, row_number() OVER () AS claim_rank FROM claimed) AS c ON true;
EXECUTE previous_settle_claim('{3}', '{b24d4d29-2d28-4e04-9fc0-f1b834c63036}', '{dead}', '{0}', '{1}', '{permanent}', '{permanent}', '{io}', '{bad}', '{"[\"bad\"]"}', '{NULL}', '{c3b5b5b9aa25673e}', 'dlq_events.dlq', 'f', '{NULL}', '{payment}', '60000000', 'host:1:old', '{"2026-11-29 03:28:41.402318+00"}');
