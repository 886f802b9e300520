-- Sealed rows a retrier claimed but could not open (as migrations/postgres/0025): the token
-- (UUID text) of the claim that found them; counted while it is the row's lease_token.
ALTER TABLE dlq_events ADD COLUMN unreadable_token TEXT;
