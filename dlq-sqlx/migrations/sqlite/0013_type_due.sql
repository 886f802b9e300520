-- Due rows in order per event type (as migrations/postgres 0032 and 0034): a claim takes each
-- type's oldest due rows from the type's own range of this index, each type a share of the
-- batch, instead of walking every type's due rows in one order and skipping the others'.
CREATE INDEX dlq_events_type_due ON dlq_events (event_type, retry_after, id) WHERE status = 'PENDING';
DROP INDEX IF EXISTS dlq_events_pending_due;
