-- Deletes a purge slice's rows (?1, a JSON array of ids), after their history: how many went
-- tells the purge whether a full slice was taken and another may follow.
DELETE FROM dlq_events WHERE id IN (SELECT value FROM json_each(?1))
