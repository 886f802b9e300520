-- The WHERE clause of a ListFilter, bound by admin::bind_filter as ?1 to ?4 and ?6 to ?11 (?5
-- is the statement's limit): NULL, or an empty id list ?4 (a JSON array), matches
-- everything; the reason ?7 matches as a substring; the keyset is the open id range (?10, ?11),
-- never an OFFSET.
(?1 IS NULL OR status = ?1) AND (?2 IS NULL OR event_type = ?2) AND (?3 IS NULL OR fingerprint = ?3)
    AND (json_array_length(?4) = 0 OR id IN (SELECT value FROM json_each(?4)))
    AND (?6 IS NULL OR error_kind = ?6) AND (?7 IS NULL OR instr(error_reason, ?7) > 0)
    AND (?8 IS NULL OR created_at >= ?8) AND (?9 IS NULL OR created_at < ?9) AND id > ?10 AND id < ?11
