-- Removes the tallies' folded rows (migration 0010). Not in a transaction: VACUUM cannot run in one.
VACUUM {schema}.dlq_tallies
