-- The columns of dlq_circuits that circuits::decode reads (migration 0004).
event_type, state, open_until, cool_down_us, trial_owner, trial_until, paused, paused_by, pause_reason,
    reason, version, updated_at
