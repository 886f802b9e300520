-- The claim's PENDING branch (0007) from a floor: only rows whose retry_after is at or after
-- `since` (NULL: every due row).
--
-- A claimed row leaves dlq_events_pending_due, but its entry stays in the index until a
-- vacuum removes it, and the claim walks the index from its oldest entry: in a drain, over
-- every row claimed since the last vacuum. At 20,000 rows a second with a vacuum every 30 s
-- that is hundreds of thousands of dead entries (a thousand leaf pages) stepped over by every
-- claim. A retrier passes the retry_after of the last row its previous full batch took, so
-- its next claim starts there; it walks from the start at least once a second, and whenever
-- a claim comes back short, so that a row due before the floor (parked by a transaction that
-- began before the claim, or left by another retrier's claim that rolled back) waits a
-- second at most. The two-argument function stays for the previous release's retriers.
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
