-- Removes retrier ?1's heartbeat row, on its shutdown.
DELETE FROM dlq_retriers WHERE owner = ?1
