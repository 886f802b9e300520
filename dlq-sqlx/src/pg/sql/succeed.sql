-- The common outcome on its own, as lean as the bare transition: rows whose lease the token
-- still holds become SUCCEEDED. Ids missing from the result were fenced. The success is the
-- row's own last attempt (read by attempts.sql; written to dlq_attempts only if an operator
-- later patches or discards the row), so nothing else is written.
UPDATE {schema}.dlq_events AS e SET
    status = 'SUCCEEDED',
    lease_until = NULL,
    lease_token = NULL,
    updated_at = now()
FROM unnest($1::int8[], $2::uuid[]) AS i(id, token)
WHERE e.id = i.id
  AND e.lease_token = i.token
  -- As in settle.sql: a CASE keeps the planner on the primary key.
  AND CASE WHEN e.status = 'PROCESSING' THEN e.lease_until > now() ELSE false END
RETURNING e.id, i.token
