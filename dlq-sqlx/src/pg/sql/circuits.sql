-- Every circuit, with the database clock (one row with NULL columns when there is none).
SELECT now() AS read_at, c.event_type, c.state, c.open_until, c.cool_down_us, c.trial_owner, c.trial_until,
       c.paused, c.paused_by, c.pause_reason, c.reason, c.version, c.updated_at
FROM (SELECT 1) AS one
LEFT JOIN {schema}.dlq_circuits AS c ON true
ORDER BY c.event_type
