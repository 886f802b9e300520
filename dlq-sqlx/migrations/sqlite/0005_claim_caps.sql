-- Per-type limits kept across retrier processes (docs/BREAKER.md §4), as
-- migrations/postgres/0011: each capped claim records when it took how many rows, and the
-- next one counts those within the cap's window. Times in microseconds since the epoch.

CREATE TABLE dlq_starts (
    event_type TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    n          INTEGER NOT NULL
);

CREATE INDEX dlq_starts_type_at ON dlq_starts (event_type, at);
