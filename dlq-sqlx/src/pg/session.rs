//! Behind a connection pooler in transaction mode (PgBouncer's `pool_mode = transaction`).
//!
//! Such a pooler hands each transaction, and each statement outside one, to whichever server
//! connection is free. What the store keeps in a session across statements needs a session of
//! its own, from [`PgConfig::session_url`](super::PgConfig::session_url):
//! - the `LISTEN` of the wake-ups (`notify`);
//! - the singleton advisory lock (`heartbeat`);
//! - the migrations (`SET search_path`, and sqlx's session advisory lock around them);
//! - the retrier's `VACUUM` and its advisory lock (`ops`).
//!
//! The rest goes through the pool. Named prepared statements (sqlx's statement cache) need
//! the pooler to track them (PgBouncer 1.21 and later, `max_prepared_statements` above 0).
//! Unnamed ones (`persistent(false)`, for statements that must be planned with their values)
//! need the same server for their parse and their execution, which sqlx sends after two
//! separate syncs: behind a pooler they run in a transaction ([`rows_unnamed`]).

use sqlx::postgres::{PgArguments, PgConnectOptions, PgRow, Postgres};
use sqlx::query::Query;
use sqlx::{PgConnection, PgPool};

use dlq_core::store::StoreResult;

use super::migrate::Scope;

/// A URL that reaches the store's database with a session of its own (not through a pooler
/// in transaction mode). Its `Debug` masks the password.
///
/// ```
/// use dlq_sqlx::postgres::SessionUrl;
///
/// let url = SessionUrl::from("postgres://dlq:s3cret@db:5432/app");
/// assert_eq!(url.as_str(), "postgres://dlq:s3cret@db:5432/app");
/// assert!(!format!("{url:?}").contains("s3cret"), "Debug masks the password");
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct SessionUrl(String);

impl SessionUrl {
    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<String> for SessionUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for SessionUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

impl std::fmt::Debug for SessionUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SessionUrl").field(&crate::mask_passwords(&self.0)).finish()
    }
}

impl super::PgConfig {
    /// The pool reaches PostgreSQL through a connection pooler in transaction mode
    /// (PgBouncer's `pool_mode = transaction`); `url` reaches the same database with a session
    /// of its own: directly, or through a pool in session mode. The store then opens
    /// connections to `url` for what must stay on one server across statements: the
    /// `LISTEN` that wakes retriers (one connection per store, once a retrier waits), the
    /// singleton lock (one per singleton retrier), the migrations, and the retrier's
    /// occasional `VACUUM`; and it runs the statements it keeps unprepared in a transaction.
    /// Everything else goes through the pool. The pooler must keep sqlx's prepared
    /// statements: PgBouncer 1.21 or later with `max_prepared_statements` above 0
    /// (`docs/SCALING.md`).
    ///
    /// ```
    /// use dlq_sqlx::PgConfig;
    ///
    /// // The pool goes through PgBouncer on 6432; the session URL to PostgreSQL itself.
    /// let config = PgConfig::default().session_url("postgres://app:s3cret@db:5432/app");
    /// assert_eq!(config.session_url.as_ref().map(|url| url.as_str()), Some("postgres://app:s3cret@db:5432/app"));
    /// assert!(!format!("{config:?}").contains("s3cret"));
    /// ```
    #[must_use]
    pub fn session_url(mut self, url: impl Into<SessionUrl>) -> Self {
        self.session_url = Some(url.into());
        self
    }
}

/// Where the store's session-bound work connects.
pub(crate) struct Session {
    /// `Some` behind a transaction pooler: the options of [`PgConfig::session_url`](super::PgConfig::session_url).
    direct: Option<PgConnectOptions>,
}

impl Session {
    /// From the configuration: the pool's own options unless a session URL is set.
    ///
    /// # Errors
    /// [`dlq_core::Error::Config`] (key `session_url`) when the URL does not parse.
    pub(crate) fn new(url: Option<&SessionUrl>) -> StoreResult<Self> {
        let direct = url
            .map(|url| {
                url.as_str().parse::<PgConnectOptions>().map_err(|error| dlq_core::Error::Config {
                    key: "session_url".into(),
                    file: None,
                    reason: format!("{}: {error}", crate::mask_passwords(url.as_str())),
                })
            })
            .transpose()?;
        Ok(Self { direct })
    }

    /// Whether the pool goes through a transaction pooler (a session URL is set).
    pub(crate) const fn pooled(&self) -> bool {
        self.direct.is_some()
    }

    /// The options of a connection that keeps its session: the session URL's, else the pool's.
    pub(crate) fn options(&self, pool: &PgPool) -> PgConnectOptions {
        self.direct.clone().unwrap_or_else(|| (*pool.connect_options()).clone())
    }
}

/// A connection for work that spans statements in one session: from the pool, or (behind a
/// transaction pooler) a connection of its own to the session URL, closed when dropped.
pub(crate) enum SessionConnection {
    Pooled(sqlx::pool::PoolConnection<Postgres>),
    Own(PgConnection),
}

impl SessionConnection {
    pub(crate) async fn acquire(session: &Session, pool: &PgPool) -> Result<Self, sqlx::Error> {
        match &session.direct {
            Some(options) => {
                let conn = super::nodelay::connect(options).await?;
                Ok(Self::Own(conn))
            }
            None => Ok(Self::Pooled(pool.acquire().await?)),
        }
    }

    /// Closes the connection rather than letting it go back to the pool (a session lock may
    /// still be held on it).
    pub(crate) fn discard(self) {
        match self {
            Self::Pooled(conn) => drop(conn.detach()),
            Self::Own(conn) => drop(conn),
        }
    }
}

impl std::ops::Deref for SessionConnection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        match self {
            Self::Pooled(conn) => conn,
            Self::Own(conn) => conn,
        }
    }
}

impl std::ops::DerefMut for SessionConnection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            Self::Pooled(conn) => conn,
            Self::Own(conn) => conn,
        }
    }
}

/// Runs an unnamed statement (`persistent(false)`) on the pool and returns its rows. Behind a
/// transaction pooler it runs in a transaction, so that its parse and its execution reach the
/// same server.
pub(crate) async fn rows_unnamed(
    session: &Session,
    pool: &PgPool,
    query: Query<'_, Postgres, PgArguments>,
) -> Result<Vec<PgRow>, sqlx::Error> {
    if !session.pooled() {
        return query.fetch_all(pool).await;
    }
    let mut tx = pool.begin().await?;
    let rows = query.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}

/// Applies the migrations of `scope` on a session connection (see [`super::migrate`]).
pub(crate) async fn migrate(session: &Session, pool: &PgPool, schema: &str, scope: Scope) -> StoreResult<()> {
    super::migrate::run_on_own_connection(pool, session.direct.as_ref(), schema, scope).await
}
