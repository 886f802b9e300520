-- Removes the dead tuples of finished rows (and their entries in the claim's index) and
-- refreshes the planner's statistics; the tallies' folded rows go too. Not in a transaction:
-- VACUUM cannot run in one.
VACUUM (ANALYZE) {schema}.dlq_events, {schema}.dlq_tallies
