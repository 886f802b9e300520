-- Marks rows a retrier could not open, under the claim that found them (migration 0012): ?1 is
-- a JSON array of [id, lease token] pairs. Fenced: a lease that no longer holds its row marks
-- nothing.
UPDATE dlq_events SET unreadable_token = lease_token
WHERE status = 'PROCESSING'
    AND EXISTS (
        SELECT 1 FROM json_each(?1) AS m
        WHERE json_extract(m.value, '$[0]') = dlq_events.id
            AND json_extract(m.value, '$[1]') = dlq_events.lease_token
    )
