-- The events table's vacuum state: dead tuples slow the claim until a vacuum removes them.
SELECT s.n_live_tup, s.n_dead_tup, GREATEST(s.last_vacuum, s.last_autovacuum) AS last_vacuum,
    current_setting('autovacuum')::bool
        AND NOT coalesce('autovacuum_enabled=false' = ANY(c.reloptions), false) AS autovacuum
FROM pg_stat_user_tables AS s
JOIN pg_class AS c ON c.oid = s.relid
WHERE s.schemaname = $1 AND s.relname = 'dlq_events'
