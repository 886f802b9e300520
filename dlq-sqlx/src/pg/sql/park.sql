-- Parks a batch of letters in one statement (group commit and park_many). The batch comes as
-- one array of dlq_park_versioned (migrations 0016 and 0020), one element per letter; its optional fields
-- come in one dlq_park_extra, NULL when the letter has none.
-- It answers with one row: the ids of the rows it inserted, with their dedupe keys and, for
-- keyed rows, their event types. A letter whose (event type, dedupe key) a live row already
-- holds (or an earlier letter of the batch) is skipped by the insert, and the caller looks its
-- id up; a key whose rows are all finished (SUCCEEDED, DISCARDED) parks a new row (migration
-- 0017: a failure of a finished event is a new failure, never swallowed). Ids come from the column's sequence as the insert reads the
-- array, so they rise in input order: the caller matches the keyless letters to the keyless
-- ids in ascending order, the others by key. (Drawing ids in a CTE first, so that each input
-- row carried its own, kept a copy of every letter for a row-per-letter answer: 7-9 % of the
-- statement's time in `pgbench` of a 64-letter batch, measured when this statement was written.)
-- Attempt 0 of the history is the row's own failure (see attempts.sql); retriers are woken
-- when a PENDING row lands, unless $3 says another write woke them a moment ago (the store
-- then sends one trailing NOTIFY). It writes its own tallies (migration 0010; parks per minute,
-- 0030, with each minute's first id, 0051) and tells the table's trigger so: cheaper than the
-- trigger's. The letters' subject hashes (migration 0022)
-- come as $4, one per letter in the same order, or NULL when no letter of the batch has one:
-- beside the row type, so that a store of the previous release, which sends no subjects,
-- still parks against this schema.
WITH untallied AS MATERIALIZED (
    SELECT set_config('dlq.untallied', 'on', true)
),
inserted AS (
    INSERT INTO {schema}.dlq_events AS e (
        event_type, handler, payload, payload_raw, payload_truncated, payload_original_len, payload_sha256,
        error_class, error_kind, error_reason, error_chain, error_stacktrace, fingerprint,
        status, max_retries, retry_after, dead_reason, dedupe_key,
        source_topic, source_partition, source_offset, source_headers, trace_context, subject, version
    )
    SELECT
        t.event_type, t.handler, t.payload,
        (t.extra).payload_raw, (t.extra).payload_original_len IS NOT NULL,
        (t.extra).payload_original_len, (t.extra).payload_sha256,
        t.error_class, t.error_kind, t.error_reason, t.error_chain, (t.extra).error_stacktrace, t.fingerprint,
        t.status, t.max_retries, now() + t.delay_us * INTERVAL '1 microsecond',
        (t.extra).dead_reason, (t.extra).dedupe_key,
        (t.extra).source_topic, (t.extra).source_partition, (t.extra).source_offset,
        COALESCE((t.extra).source_headers, '{}'), (t.extra).trace_context, ($4::text[])[t.ordinality], t.version
    FROM unnest($1::{schema}.dlq_park_versioned[]) WITH ORDINALITY AS t
    ON CONFLICT (event_type, dedupe_key) WHERE dedupe_key IS NOT NULL AND status NOT IN ('SUCCEEDED', 'DISCARDED')
    DO NOTHING
    RETURNING e.id, e.status, e.event_type, e.fingerprint, e.created_at, e.dedupe_key
),
tallied AS (
    INSERT INTO {schema}.dlq_tallies
    SELECT event_type, {schema}.dlq_tallied(status), fingerprint, count(*), min(created_at), max(created_at)
    FROM inserted GROUP BY 1, 2, 3
),
hours AS (
    INSERT INTO {schema}.dlq_parked_hours
    SELECT event_type, {schema}.dlq_minute(created_at), count(*), min(id)
    FROM inserted GROUP BY 1, 2
),
wake AS (
    SELECT pg_notify($2, '') FROM (SELECT 1 FROM inserted WHERE status = 'PENDING' LIMIT 1) AS any_pending
    WHERE $3
)
SELECT a.ids, a.keys, a.types, (SELECT count(*) FROM wake) AS woken
FROM untallied, (
    -- One pass over the inserted rows, so that each id stays beside its own key and type.
    SELECT coalesce(array_agg(id), '{}') AS ids, coalesce(array_agg(dedupe_key), '{}') AS keys,
           coalesce(array_agg(CASE WHEN dedupe_key IS NOT NULL THEN event_type END), '{}') AS types
    FROM inserted
) AS a
