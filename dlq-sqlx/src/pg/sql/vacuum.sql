-- Removes the dead tuples of finished rows (and their entries in the claim's index) and
-- refreshes the planner's statistics. Not in a transaction: VACUUM cannot run in one.
VACUUM (ANALYZE) {schema}.dlq_events
