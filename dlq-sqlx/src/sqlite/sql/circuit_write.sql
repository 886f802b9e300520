-- Writes a circuit whole, first write or not, after the compare-and-set on its version passed
-- in the same write transaction (circuit.sql); its change is logged beside it
-- (circuit_log_insert.sql).
INSERT OR REPLACE INTO dlq_circuits (event_type, state, open_until, cool_down_us, trial_owner,
    trial_until, paused, paused_by, pause_reason, reason, version, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
