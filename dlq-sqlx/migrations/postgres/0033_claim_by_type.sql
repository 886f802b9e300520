-- The claim's PENDING branch, one event type at a time through dlq_events_type_due (0032), each
-- type a share of the batch.
--
-- dlq_claim_pending (0007, 0031) walked one index of every type's due rows, oldest first, and
-- skipped the rows of the types it was not asked for: behind a flood of one type that nobody
-- claims (its circuit open) a claim of any other type visited every row of that flood. And one
-- type's backlog came first for every type claimed with it: a type whose rows came due an hour
-- after a flood of another waited for the whole flood to drain.
--
-- dlq_claim_due walks each type's own range of that index, from the type's floor (`since`, one
-- per type; NULL: its oldest entry), and gives each type an equal share of the batch, its
-- oldest due rows; what a type cannot fill goes to the types that filled theirs, round after
-- round, until the batch is full or no type has due rows left. When fewer rows are left than
-- types, it takes one more of each: up to one row a type past the batch, which the claim's
-- final cut (claim_rows.sql: rows ranked within their type, oldest first) leaves, so that the
-- oldest of those rows are the ones claimed, whatever the order of the types. Rows are locked as
-- they are taken (FOR UPDATE SKIP LOCKED, as before). Planner settings as in 0007: the only plan
-- left is each type's ordered index range.
CREATE FUNCTION dlq_claim_due(event_types text[], batch integer, since timestamptz[])
RETURNS TABLE (id bigint, retry_after timestamptz, event_type text)
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
DECLARE
    types text[];
    after_at timestamptz[];
    after_id bigint[];
    types_of text[] := '{}';
    next_types text[];
    next_at timestamptz[];
    next_id bigint[];
    ids bigint[] := '{}';
    ats timestamptz[] := '{}';
    got_ids bigint[];
    got_ats timestamptz[];
    remaining integer := batch;
    live integer;
    share integer;
    got integer;
BEGIN
    IF cardinality(event_types) = 1 AND event_types[1] IS NOT NULL THEN
        types := event_types;
        after_at := ARRAY[coalesce(since[1], '-infinity')];
    ELSE
        -- Each type once, from the earliest floor given for it.
        SELECT coalesce(array_agg(t.event_type), '{}'), coalesce(array_agg(t.since), '{}')
        INTO types, after_at
        FROM (
            SELECT u.event_type, min(coalesce(u.since, '-infinity')) AS since
            FROM unnest(event_types, since) AS u(event_type, since)
            WHERE u.event_type IS NOT NULL
            GROUP BY u.event_type
        ) AS t;
    END IF;
    after_id := array_fill((-9223372036854775807 - 1)::bigint, ARRAY[cardinality(types)]);
    WHILE remaining > 0 AND cardinality(types) > 0 LOOP
        live := cardinality(types);
        IF live = 1 THEN
            -- One type left (a claim of one type: the whole claim): the rest of the batch is its.
            RETURN QUERY
            SELECT e.id, e.retry_after, e.event_type
            FROM dlq_events AS e
            WHERE e.event_type = types[1] AND e.status = 'PENDING'
              AND (e.retry_after, e.id) > (after_at[1], after_id[1]) AND e.retry_after <= now()
            ORDER BY e.retry_after, e.id
            LIMIT remaining
            FOR UPDATE SKIP LOCKED;
            EXIT;
        END IF;
        -- Fewer rows left than types: one more of each, cut by the claim.
        share := greatest(remaining / live, 1);
        next_types := '{}';
        next_at := '{}';
        next_id := '{}';
        FOR i IN 1 .. live LOOP
            WITH taken AS (
                SELECT e.id, e.retry_after
                FROM dlq_events AS e
                WHERE e.event_type = types[i] AND e.status = 'PENDING'
                  AND (e.retry_after, e.id) > (after_at[i], after_id[i]) AND e.retry_after <= now()
                ORDER BY e.retry_after, e.id
                LIMIT share
                FOR UPDATE SKIP LOCKED
            )
            SELECT array_agg(taken.id ORDER BY taken.retry_after, taken.id),
                   array_agg(taken.retry_after ORDER BY taken.retry_after, taken.id)
            INTO got_ids, got_ats
            FROM taken;
            got := coalesce(cardinality(got_ids), 0);
            IF got > 0 THEN
                ids := ids || got_ids;
                ats := ats || got_ats;
                types_of := types_of || array_fill(types[i], ARRAY[got]);
                remaining := remaining - got;
            END IF;
            -- A type that filled its share may have more: it goes on from its last row.
            IF got = share THEN
                next_types := next_types || types[i];
                next_at := next_at || got_ats[got];
                next_id := next_id || got_ids[got];
            END IF;
        END LOOP;
        types := next_types;
        after_at := next_at;
        after_id := next_id;
    END LOOP;
    RETURN QUERY SELECT u.id, u.retry_after, u.event_type FROM unnest(ids, ats, types_of) AS u(id, retry_after, event_type);
END
$$;

COMMENT ON FUNCTION dlq_claim_due(text[], integer, timestamptz[]) IS
    'dlq: locks due PENDING rows of the given types, each type an equal share of batch, its oldest rows from its floor (since; NULL: any), skipping locked rows; up to one row a type more when fewer are left than types';

-- The previous release's retriers claim through these: the same walk, one floor for every type.
CREATE OR REPLACE FUNCTION dlq_claim_pending(event_types text[], batch integer, since timestamptz)
RETURNS TABLE (id bigint, retry_after timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
SET jit = off
ROWS 50
AS $$
BEGIN
    RETURN QUERY SELECT d.id, d.retry_after
    FROM dlq_claim_due(event_types, batch, array_fill(since, ARRAY[coalesce(cardinality(event_types), 0)])) AS d;
END
$$;

CREATE OR REPLACE FUNCTION dlq_claim_pending(event_types text[], batch integer)
RETURNS TABLE (id bigint, retry_after timestamptz)
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
SET jit = off
ROWS 50
AS $$
BEGIN
    RETURN QUERY SELECT d.id, d.retry_after FROM dlq_claim_due(event_types, batch, NULL) AS d;
END
$$;
