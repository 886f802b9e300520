-- The subject key's check value (migration 0035).
SELECT key_check FROM {schema}.dlq_subject_key
