-- no-transaction
-- A dedupe key identifies an event for one event type, among the rows still alive (PENDING,
-- PROCESSING, FAILED_PERMANENTLY): the column's UNIQUE constraint held one row per key across
-- every event type and status, so a second handler failing on the same source event (fan-out)
-- was answered with the first handler's row and its failure stored nowhere, and a failure of
-- an event whose row had succeeded or been discarded was never stored either. Rows only move
-- from alive to finished, so a row leaving the index never brings a conflict back.
-- SQLite cannot drop a column constraint, so dlq_events is rebuilt (SQLite's documented
-- procedure, as in migration 0002: foreign keys off, copy into a new table, drop, rename,
-- rebuild the indexes, check, all in one transaction). SQLite has no concurrent index build:
-- the rebuild holds the database's write lock while it copies (an embedded store's tables
-- are small; parks wait for it, up to the connection's busy timeout).
PRAGMA foreign_keys = OFF;
BEGIN IMMEDIATE;

CREATE TABLE dlq_events_new (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    event_type            TEXT    NOT NULL,
    handler               TEXT    NOT NULL DEFAULT '',
    payload               TEXT    CHECK (payload IS NULL OR json_valid(payload)),
    payload_raw           BLOB,
    payload_truncated     INTEGER NOT NULL DEFAULT 0 CHECK (payload_truncated IN (0, 1)),
    payload_original_len  INTEGER,
    payload_sha256        TEXT,
    error_class           TEXT    NOT NULL CHECK (error_class IN ('transient', 'permanent', 'fatal')),
    error_kind            TEXT    NOT NULL,
    error_reason          TEXT    NOT NULL,
    error_chain           TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(error_chain)),
    error_stacktrace      TEXT,
    fingerprint           TEXT    NOT NULL,
    status                TEXT    NOT NULL DEFAULT 'PENDING'
        CHECK (status IN ('PENDING', 'PROCESSING', 'SUCCEEDED', 'FAILED_PERMANENTLY', 'DISCARDED')),
    retry_count           INTEGER NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
    max_retries           INTEGER NOT NULL CHECK (max_retries >= 0),
    retry_after           INTEGER NOT NULL,
    dead_reason           TEXT
        CHECK (dead_reason IN ('permanent', 'retries_exhausted', 'max_age', 'undecodable', 'no_handler', 'too_large')),
    lease_owner           TEXT,
    lease_until           INTEGER,
    lease_token           TEXT,
    dedupe_key            TEXT,
    source_topic          TEXT,
    source_partition      INTEGER,
    source_offset         INTEGER,
    source_headers        TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(source_headers)),
    trace_context         TEXT,
    redrive_count         INTEGER NOT NULL DEFAULT 0 CHECK (redrive_count >= 0),
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    first_failed_at       INTEGER NOT NULL,
    last_attempt_at       INTEGER,
    CONSTRAINT dlq_events_dead_has_reason CHECK (status <> 'FAILED_PERMANENTLY' OR dead_reason IS NOT NULL),
    CONSTRAINT dlq_events_payload_present CHECK ((payload IS NULL) <> (payload_raw IS NULL)),
    CONSTRAINT dlq_events_truncation_kept
        CHECK (payload_truncated = 0 OR (payload_original_len IS NOT NULL AND payload_sha256 IS NOT NULL)),
    CONSTRAINT dlq_events_lease_held
        CHECK (status <> 'PROCESSING' OR (lease_token IS NOT NULL AND lease_until IS NOT NULL))
);

INSERT INTO dlq_events_new SELECT * FROM dlq_events;
DROP TABLE dlq_events;
ALTER TABLE dlq_events_new RENAME TO dlq_events;

-- The claim: due PENDING rows, oldest retry_after first. Rows leave the index when they
-- leave PENDING.
CREATE INDEX dlq_events_pending_due ON dlq_events (retry_after, id) WHERE status = 'PENDING';
-- Reclaiming rows whose lease expired.
CREATE INDEX dlq_events_processing_lease ON dlq_events (lease_until) WHERE status = 'PROCESSING';
-- Admin reads: stats, groups, filters.
CREATE INDEX dlq_events_type_status ON dlq_events (event_type, status);
CREATE INDEX dlq_events_fingerprint ON dlq_events (fingerprint) WHERE status IN ('PENDING', 'FAILED_PERMANENTLY');
CREATE INDEX dlq_events_created_at ON dlq_events (created_at);
-- Retention: finished rows by age.
CREATE INDEX dlq_events_finished ON dlq_events (updated_at) WHERE status IN ('SUCCEEDED', 'DISCARDED');

-- One live row per event type and dedupe key (the park's ON CONFLICT target).
CREATE UNIQUE INDEX dlq_events_live_dedupe ON dlq_events (event_type, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status NOT IN ('SUCCEEDED', 'DISCARDED');

PRAGMA foreign_key_check;
COMMIT;
PRAGMA foreign_keys = ON;
