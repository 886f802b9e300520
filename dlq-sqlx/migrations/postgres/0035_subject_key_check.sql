-- The check value of the subject key (HMAC-SHA256 of a fixed label under the key, 64 hex
-- digits; never the key): the first key to hash a subject leaves it, and an erasure with a key
-- whose check value differs is refused instead of finding no rows. One row at most.
CREATE TABLE dlq_subject_key (
    only_row   BOOLEAN     PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    key_check  TEXT        NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
