-- Compare-and-set of a circuit: written only while its version is still $3 (a concurrent
-- writer makes this one re-check the version after the other commits, and write nothing).
-- Logged in the same statement. $4 and $7 are microseconds from now(), or NULL.
WITH old AS (
    SELECT event_type, state FROM {schema}.dlq_circuits WHERE event_type = $1
), written AS (
    UPDATE {schema}.dlq_circuits AS c
    SET state = $2, open_until = now() + $4 * INTERVAL '1 microsecond', cool_down_us = $5, trial_owner = $6,
        trial_until = now() + $7 * INTERVAL '1 microsecond', paused = $8, paused_by = $9, pause_reason = $10,
        reason = $11, version = c.version + 1, updated_at = now()
    FROM old
    WHERE c.event_type = old.event_type AND c.version = $3
    RETURNING c.*, old.state AS from_state
), logged AS (
    INSERT INTO {schema}.dlq_circuit_log (event_type, from_state, to_state, reason, actor, at)
    SELECT event_type, from_state, $13, $11, $12, now() FROM written
)
SELECT event_type, state, open_until, cool_down_us, trial_owner, trial_until, paused, paused_by, pause_reason,
       reason, version, updated_at
FROM written
