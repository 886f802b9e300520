-- For a capped claim of type ?1 (migration 0005): its rows under a live lease at ?2, and the
-- rows capped claims took since ?3. Read in the claim's write transaction, so count, claim and
-- record are one step across every process sharing the file.
SELECT
    (SELECT count(*) FROM dlq_events WHERE event_type = ?1 AND status = 'PROCESSING' AND lease_until > ?2),
    (SELECT coalesce(sum(n), 0) FROM dlq_starts WHERE event_type = ?1 AND at > ?3)
