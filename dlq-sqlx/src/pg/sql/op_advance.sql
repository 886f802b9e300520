-- Moves an operation's cursor from $6 to $2 with its batch (compare-and-set: no row when
-- another process moved it first, and the batch rolls back).
UPDATE {schema}.dlq_operations
SET cursor_id = $2, moved = moved + $3, refused = refused + $4, updated_at = now()
WHERE id = $1 AND cursor_id = $5
