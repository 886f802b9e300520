-- Deletes the audit log of a purge slice's rows (?1, a JSON array of ids).
DELETE FROM dlq_audit WHERE dlq_id IN (SELECT value FROM json_each(?1))
