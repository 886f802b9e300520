-- The dead-letter table (DESIGN §5). Schema-unqualified: the migrator runs with
-- `search_path` set to the configured schema.

CREATE TABLE dlq_events (
    id                   BIGSERIAL PRIMARY KEY,
    event_type           TEXT        NOT NULL,
    handler              TEXT        NOT NULL DEFAULT '',

    -- The event: JSONB when PostgreSQL accepts it, raw bytes otherwise (not JSON, `\u0000`,
    -- nesting beyond serde's limit, truncated).
    payload              JSONB,
    payload_raw          BYTEA,
    payload_truncated    BOOLEAN     NOT NULL DEFAULT false,
    payload_original_len BIGINT,
    payload_sha256       TEXT,

    -- The latest failure, replaced (never appended) on each retry.
    error_class          TEXT        NOT NULL,
    error_kind           TEXT        NOT NULL,
    error_reason         TEXT        NOT NULL,
    error_chain          JSONB       NOT NULL DEFAULT '[]',
    error_stacktrace     TEXT,
    fingerprint          TEXT        NOT NULL,

    status               TEXT        NOT NULL DEFAULT 'PENDING',
    retry_count          INTEGER     NOT NULL DEFAULT 0,
    max_retries          INTEGER     NOT NULL DEFAULT 0,
    retry_after          TIMESTAMPTZ NOT NULL DEFAULT now(),
    dead_reason          TEXT,

    -- The claim: who holds the row, until when, and the fencing token every outcome presents.
    -- lease_owner is kept after the outcome (the retrier that last held the row); the lease
    -- is held only while status = 'PROCESSING' and lease_until is in the future.
    lease_owner          TEXT,
    lease_until          TIMESTAMPTZ,
    lease_token          UUID,

    dedupe_key           TEXT,
    source_topic         TEXT,
    source_partition     INTEGER,
    source_offset        BIGINT,
    source_headers       JSONB       NOT NULL DEFAULT '{}',
    trace_context        TEXT,

    redrive_count        INTEGER     NOT NULL DEFAULT 0,
    -- Attempt 0 of the history (the original failure) is this row's own error until a retry
    -- replaces it; the settlement that first does copies it to dlq_attempts and sets this.
    -- Parking thus writes one row, not two.
    first_failure_logged BOOLEAN     NOT NULL DEFAULT false,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    first_failed_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_attempt_at      TIMESTAMPTZ,

    CONSTRAINT dlq_events_status_check
        CHECK (status IN ('PENDING', 'PROCESSING', 'SUCCEEDED', 'FAILED_PERMANENTLY', 'DISCARDED')),
    CONSTRAINT dlq_events_dead_reason_check
        CHECK (dead_reason IN ('permanent', 'retries_exhausted', 'max_age', 'undecodable', 'no_handler')),
    CONSTRAINT dlq_events_dead_has_reason
        CHECK (status <> 'FAILED_PERMANENTLY' OR dead_reason IS NOT NULL),
    CONSTRAINT dlq_events_error_class_check
        CHECK (error_class IN ('transient', 'permanent', 'fatal')),
    CONSTRAINT dlq_events_payload_present
        CHECK (payload IS NOT NULL OR payload_raw IS NOT NULL),
    CONSTRAINT dlq_events_lease_held
        CHECK (status <> 'PROCESSING' OR (lease_token IS NOT NULL AND lease_until IS NOT NULL)),
    CONSTRAINT dlq_events_counts_check
        CHECK (retry_count >= 0 AND max_retries >= 0 AND redrive_count >= 0)
);

COMMENT ON TABLE dlq_events IS 'dlq: failed events, their failure and retry state';

-- Parking the same event twice returns the first row.
CREATE UNIQUE INDEX dlq_events_dedupe_key ON dlq_events (dedupe_key) WHERE dedupe_key IS NOT NULL;

-- The claim's two branches: due PENDING rows in (retry_after, id) order, and expired leases.
-- Partial, so finished rows never enter them and leaving PENDING removes nothing to rewrite.
CREATE INDEX dlq_events_pending_due ON dlq_events (retry_after, id) WHERE status = 'PENDING';
CREATE INDEX dlq_events_lease_expiry ON dlq_events (lease_until) WHERE status = 'PROCESSING';

-- Operators' queries: stats by type and status, time ranges, grouping by fingerprint.
CREATE INDEX dlq_events_type_status ON dlq_events (event_type, status);
CREATE INDEX dlq_events_created_at ON dlq_events (created_at);
CREATE INDEX dlq_events_fingerprint ON dlq_events (fingerprint);

-- Retention: finished rows by age.
CREATE INDEX dlq_events_finished ON dlq_events (updated_at) WHERE status IN ('SUCCEEDED', 'DISCARDED');

-- Claims leave a dead tuple per row: vacuum after ~1 % of the table changed, not the default 20 %.
ALTER TABLE dlq_events SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_vacuum_cost_delay = 1
);
