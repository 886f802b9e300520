-- The claim's PENDING branch (0007) from a floor: only rows whose retry_after is at or after
-- `since` (NULL: every due row).
--
-- The claim walked dlq_events_pending_due from its oldest entry. A claimed row's entry stays in
-- the index until a vacuum, so every claim of a drain stepped over the entries of every row
-- claimed since the last vacuum (at 20,000 rows a second and a vacuum every 30 s, hundreds of
-- thousands); and a claim of one type stepped over every due row of the types it did not ask
-- for, one heap visit each (an open circuit's flood: 3.6 s a claim behind 10 million). A
-- retrier now passes a floor: a moment before the retry_after of the newest row it claimed
-- for the same types, so its next claim starts where the rows it has not seen begin. Once
-- every 30 s it walks from the oldest entry, for a row that came due behind the floor (parked
-- by a long transaction, or left by another retrier's claim that rolled back). The
-- two-argument function stays for the previous release's retriers.
CREATE FUNCTION dlq_claim_pending(event_types text[], batch integer, since timestamptz)
RETURNS TABLE (id bigint, retry_after timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
SET plan_cache_mode = force_generic_plan
SET jit = off
ROWS 50
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    SELECT e.id, e.retry_after
    FROM dlq_events AS e
    WHERE e.status = 'PENDING' AND e.retry_after >= coalesce(since, '-infinity') AND e.retry_after <= now()
      AND CASE WHEN e.event_type = ANY(event_types) THEN true ELSE false END
    ORDER BY e.retry_after, e.id
    LIMIT batch
    FOR UPDATE SKIP LOCKED;
END
$$;

COMMENT ON FUNCTION dlq_claim_pending(text[], integer, timestamptz) IS
    'dlq: locks up to batch due PENDING rows of the given types whose retry_after is at or after since (NULL: any), oldest retry_after first, skipping locked rows';
