//! The crate's error type.

/// Errors of `dlq-sqlx` outside the store contract: connecting, migrating, schema names.
///
/// Store operations themselves return [`dlq_core::Error`], as the
/// [`DeadLetterStore`](dlq_core::DeadLetterStore) trait says.
///
/// ```
/// let err = dlq_sqlx::validate_schema("a; DROP TABLE x").unwrap_err();
/// assert!(err.to_string().starts_with("invalid schema name"));
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A schema name from configuration is not a plain SQL identifier.
    #[error("invalid schema name {name:?}: {reason}")]
    InvalidSchema {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The database could not be reached or a query failed.
    #[error("database error")]
    Database(#[source] sqlx::Error),
    /// The embedded migrations could not be applied.
    #[error("migrating the dead-letter schema failed")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    /// An error of `dlq-core` (for example a duplicate event type in the registry).
    #[error("dead-letter core error")]
    Core(#[source] dlq_core::Error),
}

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        Self::Database(err)
    }
}

impl From<sqlx::migrate::MigrateError> for Error {
    fn from(err: sqlx::migrate::MigrateError) -> Self {
        Self::Migrate(err)
    }
}

impl From<dlq_core::Error> for Error {
    fn from(err: dlq_core::Error) -> Self {
        Self::Core(err)
    }
}
