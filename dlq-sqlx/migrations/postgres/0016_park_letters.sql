-- A slimmer row for a park batch. Every field of a binary record carries its type
-- and length (8 bytes), NULL or not, so dlq_park_row (migration 0015, 23 fields) sent 192
-- bytes of headers per letter, most of them for fields a handler's failure leaves empty: a
-- 64-letter batch of small payloads grew past 16 KiB, one TLS record, where sqlx 0.9.0
-- (no TCP_NODELAY) waits for a delayed ACK. dlq_park_letter holds the fields every letter has,
-- and one dlq_park_extra for the rest, NULL when a letter has none of them (no raw or cut
-- payload, no stack trace, not dead, no dedupe key, no broker source, no trace context).
-- Only the store writes these; park.sql reads them, and its encoder (pg/park_rows.rs) writes
-- exactly these types in this order. dlq_park_row stays for stores of the previous release
-- still running against this schema during an upgrade; nothing of this release uses it.
CREATE TYPE dlq_park_extra AS (
    payload_raw          BYTEA,
    payload_original_len BIGINT,
    payload_sha256       TEXT,
    error_stacktrace     TEXT,
    dead_reason          TEXT,
    dedupe_key           TEXT,
    source_topic         TEXT,
    source_partition     INTEGER,
    source_offset        BIGINT,
    source_headers       JSONB,
    trace_context        TEXT
);

CREATE TYPE dlq_park_letter AS (
    event_type   TEXT,
    handler      TEXT,
    payload      JSONB,
    error_class  TEXT,
    error_kind   TEXT,
    error_reason TEXT,
    error_chain  JSONB,
    fingerprint  TEXT,
    status       TEXT,
    max_retries  INTEGER,
    delay_us     BIGINT,
    extra        dlq_park_extra
);

COMMENT ON TYPE dlq_park_extra IS 'dlq: the optional fields of a parked letter, NULL when it has none (park.sql)';
COMMENT ON TYPE dlq_park_letter IS 'dlq: one letter of a park batch, as the store sends it (park.sql)';
COMMENT ON TYPE dlq_park_row IS 'dlq: unused since migration 0016 (dlq_park_letter); kept for stores of the previous release during an upgrade';
