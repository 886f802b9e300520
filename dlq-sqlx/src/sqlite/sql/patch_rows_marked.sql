-- Of the rows of a patch batch (?1, a JSON array of ids), those operation ?2 has patched
-- already, by the mark in their audit entries.
SELECT DISTINCT dlq_id FROM dlq_audit
WHERE dlq_id IN (SELECT value FROM json_each(?1))
    AND action = 'patch' AND json_extract(diff, '$.operation') = ?2
