-- The four roles of a dlq deployment for one schema, and the grants each needs (docs/DESIGN.md,
-- "Roles and grants"). NOLOGIN group roles: grant them to login users
-- (`GRANT {service} TO app;`). Re-runnable: it creates only the roles that are missing,
-- takes every grant on the schema's objects back and gives the ones below, so a run after
-- `dlq migrate` also covers the tables a newer migration added. One transaction: all or nothing.
-- Run it as a role that may create roles (CREATEROLE) and owns the schema's objects, or is a
-- member of their owner (on a managed database: its admin user).
BEGIN;

DO $roles$
DECLARE
    wanted text;
BEGIN
    FOREACH wanted IN ARRAY ARRAY['{migrator_name}', '{service_name}', '{reader_name}', '{operator_name}'] LOOP
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = wanted) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', wanted);
        END IF;
    END LOOP;
    -- Who runs this must be a member of the migrator to make it an owner (a managed
    -- database's admin user has CREATEROLE, and is no superuser).
    IF NOT pg_catalog.pg_has_role(current_user, '{migrator_name}', 'MEMBER') THEN
        EXECUTE format('GRANT {migrator} TO %I', current_user);
    END IF;
END
$roles$;

-- migrator: owns the schema and everything in it, so `dlq migrate` run by a member of it can
-- create, alter and drop its objects, and a retrier run by it may vacuum. Nothing outside it.
CREATE SCHEMA IF NOT EXISTS {schema};
ALTER SCHEMA {schema} OWNER TO {migrator};
DO $owner$
DECLARE
    object record;
BEGIN
    FOR object IN
        SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = '{schema_name}' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
            AND c.relowner <> '{migrator_name}'::regrole
            -- A sequence owned by a column follows its table.
            AND NOT (c.relkind = 'S' AND EXISTS (
                SELECT FROM pg_catalog.pg_depend d
                WHERE d.objid = c.oid AND d.deptype IN ('a', 'i') AND d.refobjsubid > 0))
    LOOP
        EXECUTE format('ALTER %s %I.%I OWNER TO {migrator}',
            CASE object.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
            '{schema_name}', object.relname);
    END LOOP;
    FOR object IN
        SELECT p.oid::regprocedure AS signature FROM pg_catalog.pg_proc p
        JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = '{schema_name}' AND p.proowner <> '{migrator_name}'::regrole
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO {migrator}', object.signature);
    END LOOP;
    FOR object IN
        SELECT t.oid::regtype AS name FROM pg_catalog.pg_type t
        JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
        JOIN pg_catalog.pg_class c ON c.oid = t.typrelid
        WHERE n.nspname = '{schema_name}' AND c.relkind = 'c' AND t.typowner <> '{migrator_name}'::regrole
    LOOP
        EXECUTE format('ALTER TYPE %s OWNER TO {migrator}', object.name);
    END LOOP;
END
$owner$;

-- The grants, once the schema is migrated as far as this dlq needs (before, a run creates the
-- roles and the schema, and grants nothing else: run it again after `dlq migrate`).
DO $grants$
BEGIN
    IF to_regclass('{schema}._sqlx_migrations') IS NULL THEN
        RAISE NOTICE 'schema {schema_name} is not migrated: run dlq migrate, then this again for the grants';
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM {schema}._sqlx_migrations WHERE version >= {latest_migration} AND success) THEN
        RAISE NOTICE 'schema {schema_name} is behind migration {latest_migration}: run dlq migrate, then this again';
        RETURN;
    END IF;
    -- Start from nothing: a re-run converges on the grants below.
    REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {service}, {reader}, {operator};
    REVOKE ALL ON ALL SEQUENCES IN SCHEMA {schema} FROM {service}, {reader}, {operator};
    REVOKE ALL ON SCHEMA {schema} FROM {service}, {reader}, {operator};
    -- dlq_fold_tallies runs as its owner (migration 0050): only the roles that fold may call it.
    REVOKE EXECUTE ON FUNCTION {schema}.dlq_fold_tallies() FROM PUBLIC;
    GRANT USAGE ON SCHEMA {schema} TO {service}, {reader}, {operator};

    -- Every role checks that the schema is migrated (`_sqlx_migrations`).
    GRANT SELECT ON {schema}._sqlx_migrations TO {service}, {reader};

    -- operator-read: `ls`, `show`, `stats`, `groups`, `retriers`, `circuits`, `erasures` and the
    -- console's pages. Reads only; `show --reveal` writes an audit entry and is the operator's.
    GRANT SELECT ON {schema}.dlq_events, {schema}.dlq_attempts, {schema}.dlq_audit, {schema}.dlq_history,
        {schema}.dlq_tallies, {schema}.dlq_parked_hours, {schema}.dlq_starts, {schema}.dlq_retriers,
        {schema}.dlq_circuits, {schema}.dlq_circuit_log, {schema}.dlq_operations, {schema}.dlq_erasures,
        {schema}.dlq_event_types, {schema}.dlq_type_schemas, {schema}.dlq_subject_key
        TO {reader};

    -- operator: everything operator-read may, and the actions: discard, redrive, patch, upgrade,
    -- erase, purge, reveal, bulk operations, accepting a schema, opening and closing circuits.
    GRANT {reader} TO {operator};
    GRANT UPDATE, DELETE ON {schema}.dlq_events TO {operator};
    GRANT INSERT, DELETE ON {schema}.dlq_attempts, {schema}.dlq_audit TO {operator};
    -- The triggers on dlq_events append the tallies' deltas as the role that changed the rows.
    GRANT INSERT ON {schema}.dlq_tallies TO {operator};
    GRANT INSERT, UPDATE ON {schema}.dlq_operations TO {operator};
    GRANT INSERT ON {schema}.dlq_erasures TO {operator};
    GRANT INSERT ON {schema}.dlq_subject_key TO {operator};
    GRANT INSERT, UPDATE ON {schema}.dlq_circuits TO {operator};
    GRANT INSERT ON {schema}.dlq_circuit_log TO {operator};
    GRANT DELETE ON {schema}.dlq_type_schemas TO {operator};
    GRANT USAGE ON {schema}.dlq_attempts_id_seq, {schema}.dlq_audit_id_seq, {schema}.dlq_operations_id_seq,
        {schema}.dlq_erasures_id_seq, {schema}.dlq_circuit_log_id_seq TO {operator};
    GRANT EXECUTE ON FUNCTION {schema}.dlq_fold_tallies() TO {operator};

    -- service: parks, and runs a retrier (claims, outcomes, heartbeats, circuits, the type
    -- catalog, its upkeep and its purge of finished rows past retention). It cannot discard,
    -- erase, patch or read the audit log: it may not write dlq_audit nor dlq_erasures, and of
    -- dlq_audit it sees only the row ids its purge deletes by.
    GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.dlq_events TO {service};
    GRANT SELECT, INSERT, DELETE ON {schema}.dlq_attempts TO {service};
    GRANT SELECT (dlq_id), DELETE ON {schema}.dlq_audit TO {service};
    GRANT SELECT, INSERT ON {schema}.dlq_tallies, {schema}.dlq_parked_hours TO {service};
    GRANT SELECT, INSERT, DELETE ON {schema}.dlq_starts TO {service};
    GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.dlq_retriers TO {service};
    GRANT SELECT, INSERT, UPDATE ON {schema}.dlq_circuits, {schema}.dlq_event_types, {schema}.dlq_type_schemas
        TO {service};
    GRANT SELECT, INSERT ON {schema}.dlq_circuit_log, {schema}.dlq_subject_key TO {service};
    GRANT USAGE ON {schema}.dlq_events_id_seq, {schema}.dlq_attempts_id_seq, {schema}.dlq_circuit_log_id_seq
        TO {service};
    GRANT EXECUTE ON FUNCTION {schema}.dlq_fold_tallies() TO {service};
END
$grants$;

COMMIT;
