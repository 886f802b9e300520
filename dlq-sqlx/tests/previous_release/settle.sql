-- The previous release's settle: captured by scripts/release-statements.sh from what it
-- sent to the server; prepared for schema `dlq` and run with the parameters it sent.
-- The claimed rows hold the lease tokens they held at capture (a claim draws new ones).
UPDATE dlq.dlq_events AS e SET lease_token = t.token FROM unnest('{2}'::int8[], '{93ee064d-0db0-4afc-932d-90976644d80c}'::uuid[]) AS t(id, token) WHERE e.id = t.id;
PREPARE previous_settle AS
-- Writes a batch of outcomes in one statement (a batch of successes alone goes through the
-- leaner succeed.sql; a mixed batch comes here whole: one round trip and one commit).
-- A row changes only while the presented token still holds it (PROCESSING, same token, lease
-- not expired); ids missing from the result were fenced. Failures replace the stored error
-- (never appended). Retries and dead ends append an attempt; a success does not, as in
-- succeed.sql (the row itself is its last attempt); retries and releases wake retriers
-- (unless $14 says another write woke them a moment ago).
--   outcome: succeeded | retry | dead | released (of the final attempt);  counts: the retries
--   the outcome adds (the earlier attempts, plus 1 when the final one is a retry or counts);
--   earlier ($15): NULL, or the failures of the attempts run before the final one under the
--   same claim, oldest first, as [{"class": ..., "reason": ...}] (Settlement::Repeated).
-- The caller sends each lease once (the first outcome of a lease wins; the others are fenced).
-- lease_owner is kept as "the retrier that last held the row" (reported only while PROCESSING),
-- so the attempt records its owner without reading the row twice.
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
)
SELECT id, token, (SELECT count(*) FROM wake) AS woken FROM settled, outcome_commit;
EXECUTE previous_settle('{2}', '{93ee064d-0db0-4afc-932d-90976644d80c}', '{retry}', '{3600000000}', '{1}', '{NULL}', '{transient}', '{io}', '{"still down"}', '{"[\"still down\"]"}', '{NULL}', '{688a7a5f146be21b}', 'dlq_events.dlq', 't', '{NULL}');
