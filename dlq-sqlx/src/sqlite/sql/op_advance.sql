-- Moves operation ?1's cursor from ?6 to ?2 with its batch, ?3 rows moved and ?4 refused, at
-- ?5 (compare-and-set: it changes nothing when another process moved it first, and the batch
-- rolls back).
UPDATE dlq_operations SET cursor_id = ?2, moved = moved + ?3, refused = refused + ?4, updated_at = ?5
WHERE id = ?1 AND cursor_id = ?6
