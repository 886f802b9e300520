-- Operator actions carry a reason; `dlq undo` reads an audit entry by its id; bulk actions
-- are stored with their cursor so any machine can resume them without moving a row twice.

ALTER TABLE dlq_audit ADD COLUMN reason TEXT;
CREATE INDEX dlq_audit_id ON dlq_audit (id);

CREATE TABLE dlq_operations (
    id         BIGSERIAL PRIMARY KEY,
    action     TEXT        NOT NULL CHECK (action IN ('redrive', 'discard')),
    -- The admin layer's plan (filter and options), opaque to the store.
    spec       JSONB       NOT NULL,
    actor      TEXT        NOT NULL,
    reason     TEXT,
    -- The last dlq_events.id handled: rows are walked in ascending id order.
    cursor_id  BIGINT      NOT NULL DEFAULT 0,
    moved      BIGINT      NOT NULL DEFAULT 0,
    refused    BIGINT      NOT NULL DEFAULT 0,
    state      TEXT        NOT NULL DEFAULT 'running' CHECK (state IN ('running', 'stopped', 'done')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
