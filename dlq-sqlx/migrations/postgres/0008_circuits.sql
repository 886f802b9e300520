-- Outage-aware retries (docs/BREAKER.md): one circuit row per event type, shared by every
-- retrier, written by compare-and-set on `version`; and the log of every change (breaker
-- transitions, operators' pauses and resumes).

CREATE TABLE dlq_circuits (
    event_type   TEXT PRIMARY KEY,
    state        TEXT        NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    open_until   TIMESTAMPTZ,
    cool_down_us BIGINT      NOT NULL DEFAULT 0,
    trial_owner  TEXT,
    trial_until  TIMESTAMPTZ,
    paused       BOOLEAN     NOT NULL DEFAULT false,
    paused_by    TEXT,
    pause_reason TEXT,
    reason       TEXT,
    version      BIGINT      NOT NULL,
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE dlq_circuit_log (
    id         BIGSERIAL PRIMARY KEY,
    event_type TEXT        NOT NULL,
    from_state TEXT        NOT NULL,
    to_state   TEXT        NOT NULL,
    reason     TEXT        NOT NULL,
    actor      TEXT        NOT NULL,
    at         TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE INDEX dlq_circuit_log_type ON dlq_circuit_log (event_type, id);
