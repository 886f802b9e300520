-- The clock and the ids of a park through COPY (park_copy.rs): the transaction's now(), at
-- which the rows are created and from which they are due, and $1 ids from the table's
-- sequence, one per letter; the NOTIFY for its pending rows, if $3, goes out at the commit.
SELECT now(), ARRAY(SELECT nextval('{schema}.dlq_events_id_seq'::regclass) FROM generate_series(1, $1)),
    (SELECT count(*) FROM (SELECT pg_notify($2, '') WHERE $3) AS wake) AS woken
