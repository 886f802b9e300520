-- Rows whose latest claim could not open them (migration 0012). Only PROCESSING rows qualify:
-- the partial index dlq_events_processing_lease (WHERE status = 'PROCESSING') bounds the scan
-- to the rows in flight.
SELECT count(*) FROM dlq_events WHERE status = 'PROCESSING' AND unreadable_token = lease_token
