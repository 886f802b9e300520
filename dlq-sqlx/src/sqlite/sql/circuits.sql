-- Every circuit (migration 0004), by event type.
SELECT {circuit_columns}
FROM dlq_circuits ORDER BY event_type
