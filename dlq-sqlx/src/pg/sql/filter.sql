($1::text IS NULL OR status = $1)
      AND ($2::text IS NULL OR event_type = $2)
      AND ($3::text IS NULL OR fingerprint = $3)
      AND (cardinality($4::int8[]) = 0 OR id = ANY($4::int8[]))
      AND ($6::text IS NULL OR error_kind = $6)
      AND ($7::text IS NULL OR strpos(error_reason, $7) > 0)
      AND ($8::timestamptz IS NULL OR created_at >= $8)
      AND ($9::timestamptz IS NULL OR created_at < $9)
      AND id > $10::int8 AND id < $11::int8
