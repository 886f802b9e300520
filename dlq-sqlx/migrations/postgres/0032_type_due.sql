-- no-transaction
-- Due rows in order per event type: (event_type, retry_after, id) of the PENDING rows. It
-- replaces `dlq_events_pending_due` (retry_after, id), dropped by migration 0034. In that
-- index one type's due rows lay among every other type's, so a walk for one type visited the
-- rows of the types it did not ask for, one heap visit each: a claim, and `dlq stats`' oldest
-- due row of each type, took seconds behind a flood of a type nobody claims (its circuit
-- open, its retriers gone). Here each type's due rows are a range of their own. Built
-- CONCURRENTLY so that parks and claims go on while it is built on a large table; that cannot
-- run inside a transaction or beside another statement, hence one statement in this file.
CREATE INDEX CONCURRENTLY dlq_events_type_due ON dlq_events (event_type, retry_after, id)
    WHERE status = 'PENDING';
