-- Rows whose latest claim could not open them. Only PROCESSING rows qualify: the partial
-- index on lease_until WHERE status = 'PROCESSING' bounds the scan to the rows in flight.
SELECT count(*) FROM {schema}.dlq_events WHERE status = 'PROCESSING' AND unreadable_token = lease_token
