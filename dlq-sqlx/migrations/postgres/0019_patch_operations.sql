-- no-transaction
-- A group patch runs as a stored, resumable operation, like a bulk redrive or discard:
-- `patch` joins the actions dlq_operations accepts. The check is swapped online: the new one
-- is added NOT VALID in a short transaction of its own (the table's lock is held for the swap
-- only, and the swap gives up after lock_timeout rather than queue behind an operator's long
-- transaction), then validated under a lock that lets reads and writes of the table go on.
-- Parks and claims never touch dlq_operations. Run again after an interruption, the file
-- redoes the swap.
BEGIN;
SET LOCAL lock_timeout = '10s';
ALTER TABLE dlq_operations DROP CONSTRAINT IF EXISTS dlq_operations_action_check;
ALTER TABLE dlq_operations ADD CONSTRAINT dlq_operations_action_check
    CHECK (action IN ('redrive', 'discard', 'patch')) NOT VALID;
COMMIT;
ALTER TABLE dlq_operations VALIDATE CONSTRAINT dlq_operations_action_check;
