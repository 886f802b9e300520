//! The store's statements live in `sql/*.sql`, one a file, each opening with a comment on what
//! it does and why; the modules take them with `include_str!`. A few share a part with others,
//! named in them as a placeholder and kept in a file of its own: `{event_columns}` (the row's
//! columns), `{circuit_columns}` and `{filter}` (a `ListFilter`'s `WHERE` clause). Those are
//! [`Composed`], filled in at first use. Only our own text is put into SQL: every value is a
//! bound parameter.

use std::sync::OnceLock;

/// The columns of `dlq_events` that `codec::letter` reads.
const EVENT_COLUMNS: &str = include_str!("sql/event_columns.sql");
/// The columns of `dlq_circuits` that `circuits::decode` reads.
const CIRCUIT_COLUMNS: &str = include_str!("sql/circuit_columns.sql");
/// The `WHERE` clause of a `ListFilter`, bound by `admin::bind_filter`.
const FILTER: &str = include_str!("sql/filter.sql");

/// A statement of `sql/` with shared parts to fill in, rendered once, at its first use.
#[derive(Debug)]
pub(super) struct Composed {
    template: &'static str,
    rendered: OnceLock<String>,
}

impl Composed {
    /// The statement `template` (a file of `sql/`), not yet rendered.
    pub(super) const fn new(template: &'static str) -> Self {
        Self { template, rendered: OnceLock::new() }
    }

    /// The statement's text, its shared parts filled in.
    pub(super) fn sql(&'static self) -> &'static str {
        self.rendered.get_or_init(|| render(self.template))
    }
}

/// `template` with `{event_columns}`, `{circuit_columns}` and `{filter}` filled in.
fn render(template: &str) -> String {
    template
        .replace("{event_columns}", EVENT_COLUMNS.trim_end())
        .replace("{circuit_columns}", CIRCUIT_COLUMNS.trim_end())
        .replace("{filter}", FILTER.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::{AssertSqlSafe, Executor, SqlSafeStr};

    /// The files that are parts of statements, not statements.
    const PARTS: [&str; 3] = ["event_columns.sql", "circuit_columns.sql", "filter.sql"];

    /// Every file of `sql/` opens with its comment, and every statement, its parts filled in,
    /// has no placeholder left and prepares on the migrated schema (a typo in a statement that
    /// no test runs fails here).
    #[tokio::test]
    async fn every_statement_explains_itself_and_prepares_on_the_schema() {
        let store = crate::SqliteStore::in_memory().await.unwrap();
        let mut conn = store.pool().acquire().await.unwrap();
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/sqlite/sql");
        let mut statements = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(name.ends_with(".sql"), "{name}");
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(text.starts_with("-- "), "{name} opens with no comment");
            if PARTS.contains(&name.as_str()) {
                continue;
            }
            let sql = render(&text);
            assert!(!sql.contains('{'), "{name} has a placeholder left: {sql}");
            let prepared = (&mut *conn).prepare(AssertSqlSafe(sql).into_sql_str()).await;
            assert!(prepared.is_ok(), "{name}: {prepared:?}");
            statements += 1;
        }
        assert_ne!(statements, 0);
    }

    #[test]
    fn a_composed_statement_is_rendered_once_with_its_parts() {
        static LIST: Composed = Composed::new(include_str!("sql/list.sql"));
        let sql = LIST.sql();
        assert!(sql.contains("SELECT -- The columns of dlq_events"), "{sql}");
        assert!(sql.contains("first_failed_at, last_attempt_at, version\nFROM dlq_events"), "{sql}");
        assert!(sql.contains("AND id > ?10 AND id < ?11\nORDER BY id DESC LIMIT ?5"), "{sql}");
        assert!(std::ptr::eq(sql, LIST.sql()));
    }
}
