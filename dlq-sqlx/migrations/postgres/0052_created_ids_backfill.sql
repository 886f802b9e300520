-- The tally buckets written before migration 0051 get a first id: each bucket of the last 31
-- days the smallest id of its hour's rows (a lower bound for a minute's bucket too), in one pass
-- over those rows. A migration of its own because 0051's ALTER TABLE holds off every park
-- (parks append to dlq_parked_hours) until its transaction ends; this pass holds no lock that
-- a park waits on.
UPDATE dlq_parked_hours AS h SET first_id = f.first_id
FROM (
    SELECT dlq_hour(created_at) AS hour, min(id) AS first_id
    FROM dlq_events WHERE created_at >= dlq_hour(now() - interval '31 days')
    GROUP BY 1
) AS f
WHERE dlq_hour(h.hour) = f.hour;
