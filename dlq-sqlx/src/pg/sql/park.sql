-- Parks a batch of letters in one statement (group commit and park_many). The batch comes as
-- one array of dlq_park_letter (migration 0016), one element per letter; its optional fields
-- come in one dlq_park_extra, NULL when the letter has none.
-- Ids are drawn first, in input order, so each input row learns its own id; a row whose dedupe
-- key is already stored is skipped by the insert (`inserted` is false), and the caller looks
-- the first row's id up. Attempt 0 of the history is the row's own failure (see
-- attempts.sql); retriers are woken when a PENDING row lands, unless $3 says another
-- write woke them a moment ago (the store then sends one trailing NOTIFY). It writes its own
-- tallies (migration 0010) and tells the table's trigger so: cheaper than the trigger's.
WITH untallied AS MATERIALIZED (
    SELECT set_config('dlq.untallied', 'on', true)
),
input AS (
    SELECT
        nextval('{schema}.dlq_events_id_seq') AS id, t.event_type, t.handler, t.payload,
        (t.extra).payload_raw, (t.extra).payload_original_len IS NOT NULL AS payload_truncated,
        (t.extra).payload_original_len, (t.extra).payload_sha256,
        t.error_class, t.error_kind, t.error_reason, t.error_chain, (t.extra).error_stacktrace, t.fingerprint,
        t.status, t.max_retries, t.delay_us, (t.extra).dead_reason, (t.extra).dedupe_key,
        (t.extra).source_topic, (t.extra).source_partition, (t.extra).source_offset,
        COALESCE((t.extra).source_headers, '{}') AS source_headers, (t.extra).trace_context, t.ord
    FROM unnest($1::{schema}.dlq_park_letter[]) WITH ORDINALITY AS t(
        event_type, handler, payload, error_class, error_kind, error_reason, error_chain, fingerprint,
        status, max_retries, delay_us, extra, ord
    )
),
inserted AS (
    INSERT INTO {schema}.dlq_events AS e (
        id, event_type, handler, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256,
        error_class, error_kind, error_reason, error_chain, error_stacktrace, fingerprint,
        status, max_retries, retry_after, dead_reason, dedupe_key,
        source_topic, source_partition, source_offset, source_headers, trace_context
    )
    SELECT
        id, event_type, handler, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256,
        error_class, error_kind, error_reason, error_chain, error_stacktrace, fingerprint,
        status, max_retries, now() + delay_us * INTERVAL '1 microsecond', dead_reason, dedupe_key,
        source_topic, source_partition, source_offset, source_headers, trace_context
    FROM input
    ON CONFLICT (dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
    RETURNING e.id, e.status, e.event_type, e.fingerprint, e.created_at
),
tallied AS (
    INSERT INTO {schema}.dlq_tallies
    SELECT event_type, {schema}.dlq_tallied(status), fingerprint, count(*), min(created_at), max(created_at)
    FROM inserted GROUP BY 1, 2, 3
),
hours AS (
    INSERT INTO {schema}.dlq_parked_hours
    SELECT event_type, {schema}.dlq_hour(created_at), count(*)
    FROM inserted GROUP BY 1, 2
),
wake AS (
    SELECT pg_notify($2, '') FROM (SELECT 1 FROM inserted WHERE status = 'PENDING' LIMIT 1) AS any_pending
    WHERE $3
)
SELECT
    i.id,
    i.dedupe_key,
    i.id IN (SELECT id FROM inserted) AS inserted,
    (SELECT count(*) FROM wake) AS woken
FROM input i, untallied
ORDER BY i.ord
