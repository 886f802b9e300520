-- A batch's outcomes written and the next batch claimed in one statement: one round trip and
-- one commit between two batches of a retrier's claim loop. Rendered twice: with
-- succeed_rows.sql for a batch of successes ($1, $2; the claim's parameters from $3) and with
-- settle_rows.sql for any other batch ($1 to $15; the claim's from $16), and the claim's
-- CTEs from claim_rows.sql. The claim never takes a row this statement settles (PostgreSQL
-- does not update a row twice in one statement). It commits as the outcomes do
-- (outcome_commit), and the trigger tallies both changes (the claim's rows net to nothing).
-- One row per claimed row, or one row with a NULL id when nothing was claimed; one row (rank 1)
-- carries the settled ids and tokens (a lease missing from them was fenced).
WITH {outcome_rows},
{claim_rows},
written AS (
    SELECT array_agg(id) AS settled_ids, array_agg(token) AS settled_tokens, {woken} AS woken FROM settled
)
SELECT CASE WHEN coalesce(c.claim_rank, 1) = 1 THEN w.settled_ids END AS settled_ids,
    CASE WHEN coalesce(c.claim_rank, 1) = 1 THEN w.settled_tokens END AS settled_tokens,
    w.woken, c.*
FROM written AS w
CROSS JOIN outcome_commit
LEFT JOIN (SELECT claimed.*, row_number() OVER () AS claim_rank FROM claimed) AS c ON true
