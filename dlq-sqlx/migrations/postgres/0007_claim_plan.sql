-- The claim's PENDING branch, as a function whose plan does not depend on table statistics.
--
-- Right after a burst of parks (before any ANALYZE; autovacuum may be off or lagging) the
-- planner has no statistics for dlq_events and estimates `status = 'PENDING'` at 0.5 % of the
-- table: it then prefers a bitmap heap scan over every due row plus a sort to the ordered walk
-- of dlq_events_pending_due, and each claim of 50 reads and sorts every due row (7 ms at 20k
-- due rows, 200 ms at 200k). Planner settings attached to a function apply to the plans of
-- its statements (and are restored on exit), so here the only plan left without a disabled
-- node is the ordered index scan: it stops after `batch` rows it could lock, whatever the
-- statistics say. `search_path` is pinned to the schema the migrator runs in.
CREATE FUNCTION dlq_claim_pending(event_types text[], batch integer)
RETURNS TABLE (id bigint, retry_after timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
-- One generic plan per session (the batch size is a parameter here): never re-planned per call.
SET plan_cache_mode = force_generic_plan
ROWS 50
AS $$
#variable_conflict use_column
BEGIN
    -- The event-type test is a CASE, as in claim.sql: never a reason to use the
    -- (event_type, status) index.
    RETURN QUERY
    SELECT e.id, e.retry_after
    FROM dlq_events AS e
    WHERE e.status = 'PENDING' AND e.retry_after <= now()
      AND CASE WHEN e.event_type = ANY(event_types) THEN true ELSE false END
    ORDER BY e.retry_after, e.id
    LIMIT batch
    FOR UPDATE SKIP LOCKED;
END
$$;

COMMENT ON FUNCTION dlq_claim_pending(text[], integer) IS
    'dlq: locks up to batch due PENDING rows of the given types, oldest retry_after first, skipping locked rows';
