-- dlq_fold_tallies() runs as its owner (the role that migrated the schema), so that the roles
-- that fold the tallies (a retrier's upkeep) need neither DELETE on dlq_tallies nor on
-- dlq_parked_hours: it can only fold them. Its search_path stays pinned to this schema, with
-- pg_temp searched last so that no temporary table of the caller's can stand in for one of
-- ours. `dlq roles` takes EXECUTE from PUBLIC and gives it to the service and operator roles.
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);
ALTER FUNCTION dlq_fold_tallies() SECURITY DEFINER SET search_path FROM CURRENT;
