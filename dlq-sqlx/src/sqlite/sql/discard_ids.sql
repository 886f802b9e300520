-- Discards rows already read and checked (action_rows.sql; ?1, a JSON array of ids) at ?2.
-- Each is audited beside it with its previous status.
UPDATE dlq_events SET status = 'DISCARDED', updated_at = ?2 WHERE id IN (SELECT value FROM json_each(?1))
