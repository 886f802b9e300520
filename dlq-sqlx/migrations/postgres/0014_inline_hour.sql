-- dlq_hour (0010) written so that PostgreSQL inlines it.
--
-- The 0010 body reads extract(epoch FROM timestamptz), which is STABLE, so the IMMUTABLE
-- function could not be inlined: every parked row paid a SQL-function call (fmgr_sql, about
-- 6 % of PostgreSQL's CPU while parking). date_bin(interval, timestamptz, timestamptz) is
-- IMMUTABLE and gives the same hour: the start of the UTC hour holding `at`, also before 1970.
CREATE OR REPLACE FUNCTION dlq_hour(at timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT date_bin('1 hour', at, '1970-01-01 00:00:00+00') $$;
