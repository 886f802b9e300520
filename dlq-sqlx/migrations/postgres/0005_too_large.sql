-- A payload over the store's size limit is cut to its first bytes (with the original's
-- length and SHA-256) and parked dead with reason `too_large`: it can be neither retried nor
-- redriven until an operator patches in the whole payload.
ALTER TABLE dlq_events DROP CONSTRAINT dlq_events_dead_reason_check;
ALTER TABLE dlq_events ADD CONSTRAINT dlq_events_dead_reason_check
    CHECK (dead_reason IN ('permanent', 'retries_exhausted', 'max_age', 'undecodable', 'no_handler', 'too_large'));
