-- Sets bulk operation ?1's state to ?2 at ?3 (nothing changed: no such operation).
UPDATE dlq_operations SET state = ?2, updated_at = ?3 WHERE id = ?1
