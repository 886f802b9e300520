-- One row of a park batch: the store sends a batch as one array of these, and
-- park.sql unnests it. 23 arrays, one per column, made PostgreSQL receive, copy and join 23
-- values per statement (a tuplestore per array); with one array of rows the statement took
-- 10-19 % less time in pgbench. Only the store writes it; the fields are park.sql's input
-- columns, in order, and the store's encoder (pg/park_rows.rs) writes exactly these types.
CREATE TYPE dlq_park_row AS (
    event_type           TEXT,
    handler              TEXT,
    payload              JSONB,
    payload_raw          BYTEA,
    payload_truncated    BOOLEAN,
    payload_original_len BIGINT,
    payload_sha256       TEXT,
    error_class          TEXT,
    error_kind           TEXT,
    error_reason         TEXT,
    error_chain          JSONB,
    error_stacktrace     TEXT,
    fingerprint          TEXT,
    status               TEXT,
    max_retries          INTEGER,
    delay_us             BIGINT,
    dead_reason          TEXT,
    dedupe_key           TEXT,
    source_topic         TEXT,
    source_partition     INTEGER,
    source_offset        BIGINT,
    source_headers       JSONB,
    trace_context        TEXT
);

COMMENT ON TYPE dlq_park_row IS 'dlq: one letter of a park batch, as the store sends it (park.sql)';
