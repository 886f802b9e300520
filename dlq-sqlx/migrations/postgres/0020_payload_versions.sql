-- The version of the event's contract each row's payload is written in: the handler's
-- `#[dead_letter(version = N)]` when it parked the row. A retrier upcasts a payload from its
-- row's version to its handler's before decoding it. Rows parked before versions existed were
-- written by version 1 of their handler. A constant default is stored in the catalog, not in
-- each row: adding the column rewrites nothing and holds its lock only for the catalog update.
ALTER TABLE dlq_events ADD COLUMN version INTEGER NOT NULL DEFAULT 1;

-- Checked for every row written from now on. NOT VALID: every existing row holds the default,
-- and validating would scan the table under the lock this migration's transaction holds.
ALTER TABLE dlq_events ADD CONSTRAINT dlq_events_version_check CHECK (version >= 1) NOT VALID;

-- A park batch's letter with its version (park.sql). dlq_park_letter stays as it is for the
-- stores of the previous release still running against this schema during an upgrade (their
-- encoder writes exactly its fields); their rows get the column's default.
CREATE TYPE dlq_park_versioned AS (
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
    version      INTEGER,
    extra        dlq_park_extra
);

COMMENT ON TYPE dlq_park_versioned IS 'dlq: one letter of a park batch with its payload version, as the store sends it (park.sql)';
COMMENT ON COLUMN dlq_events.version IS 'dlq: the version of the event''s contract the payload is written in';

-- A retry that succeeded on an upcast payload, or `dlq upgrade`, rewrites the row's payload
-- in its handler's version and records it in the audit log as an `upgrade`. The list is the
-- one every release widening this check agrees on, so migrations that widen it commute. The
-- new check is wider than the one it replaces, which every existing entry satisfies: added
-- NOT VALID, it scans nothing.
ALTER TABLE dlq_audit DROP CONSTRAINT IF EXISTS dlq_audit_action_check;
ALTER TABLE dlq_audit ADD CONSTRAINT dlq_audit_action_check
    CHECK (action IN ('redrive', 'patch', 'discard', 'upgrade', 'rekey', 'erase', 'reveal')) NOT VALID;
