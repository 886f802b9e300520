-- Folds the tallies' appended rows into one per key (migration 0010); returns how many it folded.
SELECT {schema}.dlq_fold_tallies()
