-- The first write of a circuit (expected version 0): nothing when another process wrote it
-- first. Logged in the same statement. $4 and $7 are microseconds from now(), or NULL.
WITH written AS (
    INSERT INTO {schema}.dlq_circuits (event_type, state, open_until, cool_down_us, trial_owner, trial_until,
                                       paused, paused_by, pause_reason, reason, version, updated_at)
    VALUES ($1, $2, now() + $4 * INTERVAL '1 microsecond', $5, $6, now() + $7 * INTERVAL '1 microsecond',
            $8, $9, $10, $11, 1, now())
    ON CONFLICT (event_type) DO NOTHING
    RETURNING *
), logged AS (
    INSERT INTO {schema}.dlq_circuit_log (event_type, from_state, to_state, reason, actor, at)
    SELECT event_type, 'closed', $13, $11, $12, now() FROM written
)
SELECT event_type, state, open_until, cool_down_us, trial_owner, trial_until, paused, paused_by, pause_reason,
       reason, version, updated_at
FROM written
-- $3 (the expected version, 0) is bound for symmetry with circuit_update.sql.
WHERE $3::bigint = 0
