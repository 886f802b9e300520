-- Marks rows a retrier could not open, under the claim that found them (fenced: a lease that
-- no longer holds its row marks nothing).
UPDATE {schema}.dlq_events AS e SET unreadable_token = l.token
FROM unnest($1::bigint[], $2::uuid[]) AS l(id, token)
WHERE e.id = l.id AND e.status = 'PROCESSING' AND e.lease_token = l.token
