-- The subject key's check value (migration 0014).
SELECT key_check FROM dlq_subject_key
