-- Per-type limits kept across retrier processes (docs/BREAKER.md §4): a claim of a type with
-- `max-rate` (or a ramp) records when it took how many rows, and the next one, holding the
-- type's advisory lock, counts those within the cap's window. Only limited types write here.

CREATE TABLE dlq_starts (
    event_type TEXT        NOT NULL,
    at         TIMESTAMPTZ NOT NULL,
    n          INTEGER     NOT NULL
);

CREATE INDEX dlq_starts_type_at ON dlq_starts (event_type, at);

COMMENT ON TABLE dlq_starts IS 'dlq: rows claimed per capped claim of a rate-limited type, for the rate across retriers';
