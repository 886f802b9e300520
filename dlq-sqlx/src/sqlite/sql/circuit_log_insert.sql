-- Logs a change of type ?1's circuit from state ?2 to ?3, why (?4), by whom (?5), at ?6.
INSERT INTO dlq_circuit_log (event_type, from_state, to_state, reason, actor, at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
