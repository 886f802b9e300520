//! What the end-to-end tests of the `dlq` binary share: a fresh database per test.

#![allow(dead_code, unreachable_pub, reason = "each test binary uses its own part")]

use std::process::Command as Std;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use assert_cmd::Command;
use dlq_core::store::prelude::*;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A database for one test: a SQLite temp file or a PostgreSQL database, dropped at the end.
pub struct Db {
    pub url: String,
    pub pg: Option<(String, String)>,
    pub _dir: Option<tempfile::TempDir>,
}

pub fn pg_base() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

pub fn with_database(base: &str, name: &str) -> String {
    let (head, _) = base.rsplit_once('/').unwrap();
    format!("{head}/{name}")
}

impl Db {
    pub async fn sqlite() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("dlq.db").display());
        Self { url, pg: None, _dir: Some(dir) }
    }

    pub async fn postgres() -> Self {
        let base = pg_base();
        let name = format!("dlq_cli_{}_{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let admin = sqlx::PgPool::connect(&base).await.expect("PostgreSQL at DATABASE_URL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&admin).await.unwrap();
        Self { url: with_database(&base, &name), pg: Some((base, name)), _dir: None }
    }

    /// The store, migrated.
    pub async fn store(&self) -> Arc<dyn DeadLetterStore> {
        if self.pg.is_some() {
            Arc::new(dlq_sqlx::PgStore::connect(&self.url).await.unwrap())
        } else {
            Arc::new(dlq_sqlx::SqliteStore::connect(&format!("{}?mode=rwc", self.url)).await.unwrap())
        }
    }

    /// Runs one statement as a client other than dlq: what the tools must read back, though
    /// dlq never writes it.
    pub async fn sql(&self, statement: String) {
        if self.pg.is_some() {
            let pool = sqlx::PgPool::connect(&self.url).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&pool).await.unwrap();
        } else {
            let pool = sqlx::SqlitePool::connect(&self.url).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&pool).await.unwrap();
        }
    }

    /// JSON documents the database accepts and serde cannot read, as SQL expressions: a
    /// number outside `f64`, nesting past serde's limit of 128 (SQLite's own limit is 1,000),
    /// and on SQLite a string of invalid UTF-8.
    pub fn unreadable_json(&self) -> Vec<String> {
        if self.pg.is_some() {
            let deep = "(repeat('[', 10000) || repeat(']', 10000))::jsonb";
            vec![r#"'{"n": 1e400}'::jsonb"#.into(), deep.into(), r#"'[-1e400, 1e-400]'::jsonb"#.into()]
        } else {
            let deep = format!("'{}{}'", "[".repeat(900), "]".repeat(900));
            vec![r#"'{"n": 1e400}'"#.into(), deep, r#"CAST(X'7B226E223A2022FF227D' AS TEXT)"#.into()]
        }
    }

    pub fn dlq(&self) -> Command {
        let mut cmd = Command::cargo_bin("dlq").unwrap();
        cmd.env("DATABASE_URL", &self.url).env("NO_COLOR", "1").env("USER", "oncall").env_remove("DLQ_SUBJECT_KEY");
        cmd
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some((base, name)) = self.pg.take() {
            let _ =
                Std::new("psql").args([&base, "-qc", &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")]).output();
        }
    }
}
