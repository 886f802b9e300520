-- JIT compilation off inside dlq's functions. Their queries are short walks of an index, but
-- a plan made without table statistics, or a generic plan (the claim's batch size is a
-- parameter), can carry an estimated cost in the millions on a big table. Past
-- jit_above_cost (100,000 by default) PostgreSQL compiled the claim's walk with LLVM on every
-- call: about 200 ms a claim at 10 million due rows, for a walk that takes 1 ms, and a drain
-- of that backlog ran at 900 rows/s. A function's SET applies to the statements it runs, so
-- the rest of the session keeps its own setting. The tiny SQL helpers (dlq_hour,
-- dlq_tallied) keep none: a SET would stop PostgreSQL from inlining them.
ALTER FUNCTION dlq_claim_pending(text[], integer) SET jit = off;
ALTER FUNCTION dlq_count_created(timestamptz, timestamptz, bigint) SET jit = off;
ALTER FUNCTION dlq_fold_tallies() SET jit = off;
ALTER FUNCTION dlq_tally() SET jit = off;
ALTER FUNCTION dlq_tally_truncate() SET jit = off;
