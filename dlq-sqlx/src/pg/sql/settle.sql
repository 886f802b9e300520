-- Writes a batch of outcomes in one statement (a batch of successes alone goes through the
-- leaner succeed.sql; a mixed batch comes here whole: one round trip and one commit).
-- A row changes only while the presented token still holds it (PROCESSING, same token, lease
-- not expired); ids missing from the result were fenced. Failures replace the stored error
-- (never appended). Retries and dead ends append an attempt; a success does not, as in
-- succeed.sql (the row itself is its last attempt); retries and releases wake retriers
-- (unless $14 says another write woke them a moment ago).
--   outcome: succeeded | retry | dead | released (of the final attempt);  counts: the retries
--   the outcome adds (the earlier attempts, plus 1 when the final one is a retry or counts);
--   earlier ($15): NULL, or the failures of the attempts run before the final one under the
--   same claim, oldest first, as [{"class": ..., "reason": ...}] (Settlement::Repeated).
-- The caller sends each lease once (the first outcome of a lease wins; the others are fenced).
-- lease_owner is kept as "the retrier that last held the row" (reported only while PROCESSING),
-- so the attempt records its owner without reading the row twice.
WITH {settle_rows}
SELECT id, token, (SELECT count(*) FROM wake) AS woken FROM settled, outcome_commit
