-- The circuit of event type ?1, read in the write transaction of a compare-and-set on its
-- version (no row: the circuit is closed).
SELECT {circuit_columns}
FROM dlq_circuits WHERE event_type = ?1
