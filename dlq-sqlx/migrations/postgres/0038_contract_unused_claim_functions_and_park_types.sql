-- The first contract migration (docs/DESIGN.md, "Rolling upgrades"): it drops what no statement
-- of this release or of the previous one uses, so `dlq migrate` leaves it for
-- `dlq migrate --contract`.
-- - dlq_claim_pending, both signatures: kept by migrations 0031 and 0033 for the retriers of
--   the releases before per-type claims; claims go through dlq_claim_due.
-- - dlq_park_row (migration 0015) and dlq_park_letter (0016): kept for the stores of the
--   releases before payload versions; parks send dlq_park_versioned (0020).
DROP FUNCTION IF EXISTS dlq_claim_pending(text[], integer, timestamptz);
DROP FUNCTION IF EXISTS dlq_claim_pending(text[], integer);
DROP TYPE IF EXISTS dlq_park_letter;
DROP TYPE IF EXISTS dlq_park_row;
