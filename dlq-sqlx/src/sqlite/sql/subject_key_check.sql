-- Keeps ?1 as the subject key's check value, at ?2, unless one is kept already (migration
-- 0014): returns it when kept, no row otherwise, and then subject_key_read.sql reads the kept
-- one in the same transaction.
INSERT INTO dlq_subject_key (only_row, key_check, created_at) VALUES (1, ?1, ?2)
ON CONFLICT (only_row) DO NOTHING
RETURNING key_check
