-- The status test is in plain sight for the statuses the partial indexes hold (migration
-- 0012: a page of pending or dead rows of one type or group is a short index scan) and hidden
-- in a CASE for SUCCEEDED, which only the retention index holds: a page of succeeded rows walks
-- the primary key newest first and stops after the page (on a table without statistics the
-- planner would otherwise fetch and sort every finished row). With a creation time from $8 on,
-- the store raises the id range's lower end $10 to the first id such a row can have (migration
-- 0051; there is no created_at index), read before this statement.
(CASE WHEN $1::text IS NULL THEN true
          WHEN $1 = 'SUCCEEDED' THEN CASE WHEN status = 'SUCCEEDED' THEN true ELSE false END
          ELSE status = $1 END)
      AND ($2::text IS NULL OR event_type = $2)
      AND ($3::text IS NULL OR fingerprint = $3)
      AND (cardinality($4::int8[]) = 0 OR id = ANY($4::int8[]))
      AND ($6::text IS NULL OR error_kind = $6)
      AND ($7::text IS NULL OR strpos(error_reason, $7) > 0)
      AND ($8::timestamptz IS NULL OR created_at >= $8)
      AND ($9::timestamptz IS NULL OR created_at < $9)
      AND ($10::int8 IS NULL OR id > $10) AND ($11::int8 IS NULL OR id < $11)
