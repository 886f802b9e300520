-- The rows stored under the subject hash $1, whatever their status (migration 0023's index).
SELECT count(*) FROM {schema}.dlq_events WHERE subject = $1
