-- Sealed rows a retrier claimed but could not open (their key is not in its ring): the token
-- of the claim that found them, so that `dlq stats` and health count, from any process, the
-- rows whose latest claim could not open them (status PROCESSING, lease_token equal). A claim
-- by a retrier that holds the key gives the row a new token: it no longer counts. Nullable,
-- no default: adding it rewrites nothing.
ALTER TABLE dlq_events ADD COLUMN unreadable_token UUID;
