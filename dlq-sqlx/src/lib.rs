//! PostgreSQL and SQLite stores for `dlq` (being written).
