-- no-transaction
-- A dedupe key identifies an event for one event type, among the rows still alive (PENDING,
-- PROCESSING, FAILED_PERMANENTLY). The unique index of migration 0001 held one row per key
-- across every event type and status: two handlers failing on one Kafka record (fan-out, or
-- two services sharing the store) derived the same key, and the second handler's failure was
-- answered with the first handler's row and stored nowhere; a failure of an event whose row
-- had already succeeded or been discarded (a topic replayed, a republished poison) was
-- answered with that finished row and never stored either. Rows only ever move from alive to
-- finished (a redrive moves FAILED_PERMANENTLY to PENDING; nothing reopens a finished row), so
-- a row leaving the index never brings a conflict back.
--
-- Built CONCURRENTLY, so parks and claims go on while it is built on a large table (a plain
-- CREATE INDEX would block every write for the whole build). That cannot run inside a
-- transaction or beside another statement, hence one statement in this file; migration 0018
-- drops the old index once this one is in place. A build that was interrupted leaves an
-- INVALID index; `dlq_sqlx::postgres::migrate` drops such a leftover before it runs this file
-- again.
CREATE UNIQUE INDEX CONCURRENTLY dlq_events_live_dedupe ON dlq_events (event_type, dedupe_key)
    WHERE dedupe_key IS NOT NULL AND status NOT IN ('SUCCEEDED', 'DISCARDED');
