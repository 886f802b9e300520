-- Keeps $1 as the subject key's check value unless one is kept already (migration 0035); the
-- kept one is read by subject_key_read.sql after it.
INSERT INTO {schema}.dlq_subject_key (key_check) VALUES ($1) ON CONFLICT (only_row) DO NOTHING
