-- Erasure by data subject (a customer, a card holder): a row parked with a subject keeps its
-- keyed hash (HMAC-SHA256 under the service's key, 64 hex digits; never the subject), and
-- `dlq erase --subject ...` deletes every row holding the hash, with its history, in one
-- transaction. The column is NULL for rows parked without a subject and for rows of earlier
-- releases: adding a nullable column without a default rewrites nothing. Its index is built
-- CONCURRENTLY by migration 0023.
ALTER TABLE dlq_events ADD COLUMN subject TEXT;

-- What each erasure did: who, why, when, how many rows, attempts and audit entries, and the
-- first digits of the hash (enough to tell two erasures apart, too few to find the rows).
-- Not in dlq_audit: its entries belong to a row, and an erasure deletes the row with them.
CREATE TABLE dlq_erasures (
    id              BIGSERIAL   PRIMARY KEY,
    subject_prefix  TEXT        NOT NULL,
    erased_rows     BIGINT      NOT NULL,
    erased_attempts BIGINT      NOT NULL,
    erased_audit    BIGINT      NOT NULL,
    actor           TEXT        NOT NULL,
    reason          TEXT        NOT NULL,
    at              TIMESTAMPTZ NOT NULL DEFAULT now()
);
