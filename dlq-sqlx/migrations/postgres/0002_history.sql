-- One row per attempt (the original failure is attempt 0) and one per operator action.
-- No foreign keys: the hot settle path appends here without a lookup per row, and the
-- store deletes a row's history with the row (purge, drop_oldest).

CREATE TABLE dlq_attempts (
    dlq_id       BIGINT      NOT NULL,
    id           BIGSERIAL,
    attempt      INTEGER     NOT NULL,
    outcome      TEXT        NOT NULL,
    error_class  TEXT,
    error_reason TEXT,
    owner        TEXT,
    at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- One index serves both identity and "the history of a row, oldest first".
    CONSTRAINT dlq_attempts_pkey PRIMARY KEY (dlq_id, id),
    CONSTRAINT dlq_attempts_outcome_check CHECK (outcome IN ('failed', 'succeeded', 'retry', 'dead'))
);

CREATE TABLE dlq_audit (
    dlq_id BIGINT      NOT NULL,
    id     BIGSERIAL,
    action TEXT        NOT NULL,
    actor  TEXT        NOT NULL,
    diff   JSONB       NOT NULL,
    at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT dlq_audit_pkey PRIMARY KEY (dlq_id, id),
    CONSTRAINT dlq_audit_action_check CHECK (action IN ('redrive', 'patch', 'discard'))
);

ALTER TABLE dlq_attempts SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.01,
    autovacuum_vacuum_insert_scale_factor = 0.01
);
ALTER TABLE dlq_audit SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.01);
