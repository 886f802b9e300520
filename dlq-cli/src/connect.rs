//! Opening the store named by `--database-url`, and checking its schema is migrated.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use dlq_core::store::prelude::*;
use dlq_sqlx::{PgConfig, PgStore, SqliteStore};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::SqliteConnectOptions;

use crate::Failure;

/// How long connecting to PostgreSQL may take before the CLI gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Which store a URL names.
pub(crate) enum Target<'a> {
    Postgres(&'a str),
    Sqlite(&'a str),
}

pub(crate) fn target(url: &str) -> Result<Target<'_>, Failure> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Target::Postgres(url))
    } else if url.starts_with("sqlite:") {
        Ok(Target::Sqlite(url))
    } else {
        let scheme = url.split_once(':').map_or("(none)", |(s, _)| s);
        Err(Failure::usage(format!("unsupported database URL scheme `{scheme}`: use postgres://… or sqlite://FILE")))
    }
}

/// What the store is opened for, which sizes its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Use {
    /// One verb, run once by a new process: one connection. Every connection costs a server
    /// process that starts with cold caches (and, over TLS, a handshake): `dlq stats`, whose
    /// reads are asked together, took 49–68 ms (median) on up to ten connections and 37 ms on
    /// one at 10M rows (`docs/BENCHMARKS.md`).
    Verb,
    /// The console (`dlq serve`): many requests at once, for as long as it runs.
    Console,
}

/// What `open` does to the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Migrate {
    /// Nothing: a schema that is missing or behind is an error that says to run `dlq migrate`.
    No,
    /// `dlq migrate`: every migration but this release's contract ones (PostgreSQL).
    Expand,
    /// `dlq migrate --contract`: every migration.
    Contract,
}

/// What `dlq migrate` did and left, each migration as `0038 contract …`.
#[derive(Debug, Default)]
pub(crate) struct Migrated {
    /// The contract migrations it applied.
    pub(crate) contracted: Vec<String>,
    /// This release's contract migrations still to apply with `--contract`.
    pub(crate) contract_waiting: Vec<String>,
}

/// Opens the store for `purpose`, migrating it as `migrate` says (and creating a missing
/// SQLite file when it migrates).
/// `session_url` (PostgreSQL only): behind a transaction pooler, where session work connects.
pub(crate) async fn open(
    url: &str,
    schema: &str,
    session_url: Option<&str>,
    migrate: Migrate,
    purpose: Use,
) -> Result<(Arc<dyn DeadLetterStore>, Migrated), Failure> {
    match target(url)? {
        Target::Postgres(url) => open_pg(url, schema, session_url, migrate, purpose).await,
        Target::Sqlite(_) if session_url.is_some() => {
            Err(Failure::usage("--session-url (DLQ_SESSION_URL) is for PostgreSQL behind a pooler, not SQLite"))
        }
        Target::Sqlite(url) => Ok((open_sqlite(url, migrate != Migrate::No).await?, Migrated::default())),
    }
}

/// `dlq roles --apply`: the roles and their grants set up on `schema` (PostgreSQL only), on a
/// session connection (through the session URL behind a pooler: the SQL is one transaction of
/// many statements).
pub(crate) async fn apply_roles(
    url: &str,
    schema: &str,
    session_url: Option<&str>,
    roles: &dlq_sqlx::postgres::Roles,
) -> Result<(), Failure> {
    let Target::Postgres(url) = target(url)? else {
        return Err(Failure::usage("roles are PostgreSQL's: SQLite has no roles (protect the file instead)"));
    };
    dlq_sqlx::postgres::validate_schema(schema).map_err(|e| Failure::usage(dlq_core::admin::one_line(&e)))?;
    let pool = pool(session_url.unwrap_or(url), Use::Verb).await?;
    let result = dlq_sqlx::postgres::apply_roles(&pool, schema, roles).await;
    pool.close().await;
    result.map_err(Failure::from)
}

async fn open_pg(
    url: &str,
    schema: &str,
    session_url: Option<&str>,
    migrate: Migrate,
    purpose: Use,
) -> Result<(Arc<dyn DeadLetterStore>, Migrated), Failure> {
    dlq_sqlx::postgres::validate_schema(schema).map_err(|e| Failure::usage(dlq_core::admin::one_line(&e)))?;
    let pool = pool(url, purpose).await?;
    let run_migrations = migrate != Migrate::No;
    let mut config = PgConfig::default().schema(schema).run_migrations(run_migrations).park_timeout(CONNECT_TIMEOUT);
    if let Some(session_url) = session_url {
        PgConnectOptions::from_str(session_url)
            .map_err(|e| Failure::usage(format!("invalid session URL: {}", describe(&e))))?;
        config = config.session_url(session_url);
    }
    // With a session URL the migrations run on a connection of its own to it.
    let store = PgStore::from_pool(pool, config).await.map_err(Failure::from)?;
    let mut migrated = Migrated::default();
    match migrate {
        Migrate::No => check_migrated(&store, schema).await?,
        Migrate::Expand => {}
        Migrate::Contract => {
            let applied = store.migrate_contract().await.map_err(Failure::from)?;
            migrated.contracted = applied.iter().map(ToString::to_string).collect();
        }
    }
    if run_migrations {
        let status = dlq_sqlx::postgres::schema_status(store.pool(), schema).await.map_err(Failure::from)?;
        migrated.contract_waiting = status.contract_waiting.iter().map(ToString::to_string).collect();
    }
    Ok((Arc::new(store), migrated))
}

/// The console's pool: the overview's nine reads at once, and a page beside them.
const CONSOLE_CONNECTIONS: u32 = 10;

/// A pool on `url` for `purpose`, with its first connection made (or the reason it cannot be).
async fn pool(url: &str, purpose: Use) -> Result<sqlx::PgPool, Failure> {
    let mut options = PgConnectOptions::from_str(url)
        .map_err(|e| Failure::usage(format!("invalid database URL: {}", describe(&e))))?;
    // sqlx keeps the brackets of an IPv6 host (`[::1]`), which the resolver does not take.
    let host = options.get_host().to_owned();
    if let Some(bare) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        options = options.host(bare);
    }
    let at = format!("{host}:{}", options.get_port());
    let unreachable = |why: String| Failure::error(format!("cannot reach PostgreSQL at {at}: {why}"));
    let no_answer = || unreachable(format!("no answer within {CONNECT_TIMEOUT:?}"));
    // The pool retries a refused connection until its timeout and then says only that it
    // timed out: a refused or unreachable server is found by a TCP connection that sends
    // nothing (which PostgreSQL does not log), and the pool's first connection, kept for the
    // verb, reports the rest (no such database, authentication failed) as the server says it.
    // (A host that starts with `/` is a directory of Unix sockets, as `socket` is.)
    if options.get_socket().is_none() && !options.get_host().starts_with('/') {
        let probe = tokio::net::TcpStream::connect((options.get_host(), options.get_port()));
        tokio::time::timeout(CONNECT_TIMEOUT, probe)
            .await
            .map_err(|_| no_answer())?
            .map_err(|e| unreachable(describe_io(&e)))?;
    }
    // A verb's connection is seconds old when reused: no ping before each statement.
    let pool = match purpose {
        Use::Verb => PgPoolOptions::new().max_connections(1).test_before_acquire(false),
        Use::Console => PgPoolOptions::new().max_connections(CONSOLE_CONNECTIONS),
    };
    let pool = dlq_sqlx::postgres::with_tcp_nodelay(pool, &options);
    let nodelay_options = options.clone();
    let pool = pool.acquire_timeout(CONNECT_TIMEOUT).connect_lazy_with(options);
    // A person waits for these connections' handshakes: TCP_NODELAY on before them (over TLS,
    // two waits of about 45 ms each on the server's delayed ACK otherwise). The verb's one
    // connection; the console's pool filled at once, so that its first pages (the overview
    // reads nine things together) open no connection.
    let watch = dlq_sqlx::postgres::watch_tcp_nodelay(&nodelay_options);
    let first = tokio::time::timeout(CONNECT_TIMEOUT, pool.acquire()).await.map_err(|_| no_answer())?;
    let first = first.map_err(|e| unreachable(describe(&e)))?;
    if purpose == Use::Console {
        let mut more = tokio::task::JoinSet::new();
        for _ in 1..CONSOLE_CONNECTIONS {
            let pool = pool.clone();
            more.spawn(async move { pool.acquire().await });
        }
        // All held at once, so that each is a connection of its own. A server that allows
        // fewer leaves the rest to be made when needed.
        let _ = tokio::time::timeout(CONNECT_TIMEOUT, async {
            let mut held = Vec::new();
            while let Some(connection) = more.join_next().await {
                held.push(connection);
            }
            held
        })
        .await;
    }
    drop(watch);
    drop(first);
    Ok(pool)
}

fn unreachable_pg(err: &sqlx::Error) -> Failure {
    Failure::error(format!("cannot reach PostgreSQL: {}", describe(err)))
}

/// A sqlx error as a person would say it: the server's own message (without the line of
/// PostgreSQL's source that sqlx appends), "connection refused" rather than an OS error
/// number, and no "error with configuration:" said twice.
pub(crate) fn describe(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => db.message().to_owned(),
        sqlx::Error::Io(io) => describe_io(io),
        sqlx::Error::Tls(tls) => format!("TLS: {}", dlq_core::admin::one_line(&**tls)),
        sqlx::Error::PoolTimedOut => format!("no connection within {CONNECT_TIMEOUT:?}"),
        sqlx::Error::Configuration(inner) => {
            let text = dlq_core::admin::one_line(&**inner);
            let mut text = text.as_str();
            while let Some(rest) = text.strip_prefix("error with configuration: ") {
                text = rest;
            }
            text.to_owned()
        }
        other => dlq_core::admin::one_line(other),
    }
}

fn describe_io(io: &std::io::Error) -> String {
    use std::io::ErrorKind;
    match io.kind() {
        ErrorKind::ConnectionRefused => "connection refused".into(),
        ErrorKind::ConnectionReset => "connection reset by the server".into(),
        ErrorKind::TimedOut => "timed out".into(),
        ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => "host unreachable".into(),
        _ => {
            let text = io.to_string();
            // "... (os error 111)": the number says nothing more than the text.
            match text.rfind(" (os error ") {
                Some(at) if text.ends_with(')') => text[..at].to_owned(),
                _ => text,
            }
        }
    }
}

/// The schema has every migration this release's statements need (this release's contract
/// migrations may wait: they only drop what the previous release used).
async fn check_migrated(store: &PgStore, schema: &str) -> Result<(), Failure> {
    let status = dlq_sqlx::postgres::schema_status(store.pool(), schema).await.map_err(|e| match &e {
        dlq_core::Error::Store(source) => match source.downcast_ref::<sqlx::Error>() {
            Some(err) => unreachable_pg(err),
            None => Failure::error(dlq_core::admin::one_line(&e)),
        },
        _ => Failure::error(dlq_core::admin::one_line(&e)),
    })?;
    if let Some(newer) = status.newer.iter().max() {
        return Err(Failure::error(format!(
            "schema `{schema}` was migrated by a newer dlq (migration {newer}): use that release's `dlq`"
        )));
    }
    let Some(needed) = status.missing.last() else { return Ok(()) };
    let all = dlq_sqlx::postgres::MIGRATOR.iter().count();
    let found = if status.missing.len() == all {
        "has no dlq tables".to_owned()
    } else {
        format!("lacks migration {}", status.missing.first().map_or(needed.version, |s| s.version))
    };
    Err(Failure::error(format!(
        "schema `{schema}` {found}: run `dlq migrate` (this dlq needs migration {})",
        needed.version
    )))
}

async fn open_sqlite(url: &str, migrate: bool) -> Result<Arc<dyn DeadLetterStore>, Failure> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|e| Failure::usage(format!("invalid database URL: {}", describe(&e))))?;
    let path = options.get_filename().to_owned();
    if !migrate {
        if !path.exists() {
            return Err(Failure::error(format!(
                "no SQLite database at {}: run `dlq migrate` to create it",
                shown(&path)
            )));
        }
        // Checked before the store opens the file, since opening it migrates it: a verb
        // pointed at another application's file must not create dlq's tables in it.
        check_sqlite_migrated(options.clone(), &path).await?;
    }
    let store = SqliteStore::connect_with(options.create_if_missing(migrate))
        .await
        .map_err(|e| Failure::error(dlq_core::admin::one_line(&e)))?;
    Ok(Arc::new(store))
}

/// An SQLite path for a message: what the URL named, a `user:password@` in it masked as a
/// URL's would be (`sqlite://u:pw@/x.db` names the file `u:pw@/x.db`).
fn shown(path: &std::path::Path) -> String {
    let url = format!("sqlite://{}", path.display());
    dlq_sqlx::mask_passwords(&url).trim_start_matches("sqlite://").to_owned()
}

/// The SQLite file has every embedded migration; read on a read-only connection that sets no
/// journal mode, so the check writes nothing to the file.
async fn check_sqlite_migrated(options: SqliteConnectOptions, path: &std::path::Path) -> Result<(), Failure> {
    let latest = dlq_sqlx::sqlite::MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let options = options.create_if_missing(false).read_only(true);
    let failed = |e: sqlx::Error| Failure::error(format!("cannot read {}: {}", shown(path), describe(&e)));
    let mut conn = <sqlx::SqliteConnection as sqlx::Connection>::connect_with(&options).await.map_err(failed)?;
    let tracked: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations')",
    )
    .fetch_one(&mut conn)
    .await
    .map_err(failed)?;
    let version: i64 = if tracked {
        sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM _sqlx_migrations WHERE success")
            .fetch_one(&mut conn)
            .await
            .map_err(failed)?
    } else {
        0
    };
    let _ = sqlx::Connection::close(conn).await;
    let behind = |found: String| {
        Failure::error(format!("{} {found}: run `dlq migrate` (this dlq needs migration {latest})", shown(path)))
    };
    if !tracked {
        return Err(behind("has no dlq tables".into()));
    }
    if version < latest {
        return Err(behind(format!("is at migration {version}")));
    }
    Ok(())
}
