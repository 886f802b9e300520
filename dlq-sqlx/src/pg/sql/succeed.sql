-- The common outcome on its own, as lean as the bare transition: rows whose lease the token
-- still holds become SUCCEEDED. Ids missing from the result were fenced. The success is the
-- row's own last attempt (read by attempts.sql; written to dlq_attempts only if an operator
-- later patches or discards the row), so nothing else is written.
WITH {succeed_rows}
SELECT id, token FROM settled, outcome_commit
