//! Configuration: the crate's error type, the retry schedule (file or environment), and
//! duration parsing.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// Errors of `dlq-sqlx` outside the store contract: configuration, connecting, migrating.
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
    /// A configuration value could not be used.
    #[error("invalid configuration value for `{key}` ({value:?}): {reason}")]
    Config {
        /// The key (file key or environment variable).
        key: String,
        /// The value found.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration file could not be read.
    #[error("could not read configuration file {path}")]
    ConfigFile {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A configuration file is not valid JSON of the expected shape.
    #[error("could not parse configuration file {path}")]
    ConfigParse {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: serde_json::Error,
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

/// The retry schedule and how the retrier runs: the `dlq.retry` section of a configuration.
///
/// The defaults: enabled, batches of 50, each row's own retry limit, draining continuously; set [`fixed_rate`](Self::fixed_rate) for the classic "every 6 hours,
/// 50 events" scheduler. Load it from a JSON file ([`from_json_file`](Self::from_json_file)),
/// from `DLQ_RETRY_*` environment variables ([`from_env`](Self::from_env)), or both.
///
/// ```
/// use dlq_sqlx::RetryConfig;
/// use std::time::Duration;
///
/// let config = RetryConfig::from_json_str(r#"{
///     "dlq": { "retry": { "enabled": true, "max-retries": 240, "batch-size": 50, "fixed-rate": "6h" } }
/// }"#)?;
/// assert_eq!(config.fixed_rate, Some(Duration::from_secs(6 * 3600)));
/// assert_eq!(config.max_retries, Some(240));
/// # Ok::<(), dlq_sqlx::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Whether the retrier runs at all; when `false`, [`run`](crate::PgRetrier::run) returns at once.
    pub enabled: bool,
    /// Overrides the retry limit stored with each row (the reference design uses 240).
    pub max_retries: Option<u32>,
    /// Rows claimed at once.
    pub batch_size: usize,
    /// When set, claim one batch every period instead of draining continuously.
    #[serde(deserialize_with = "de_opt_duration")]
    pub fixed_rate: Option<Duration>,
    /// In continuous mode, the longest wait between looks when no notification arrives.
    #[serde(deserialize_with = "de_duration")]
    pub poll_interval: Duration,
    /// Handlers run at once within a batch.
    pub concurrency: usize,
    /// Claim loops run at once.
    pub workers: usize,
    /// How long a claim holds a row.
    #[serde(deserialize_with = "de_duration")]
    pub lease: Duration,
    /// How long in-flight handlers may finish after shutdown before their rows are released.
    #[serde(deserialize_with = "de_duration")]
    pub shutdown_grace: Duration,
    /// Run one instance at a time, elected by a PostgreSQL advisory lock (like ShedLock).
    pub singleton: bool,
    /// How often the retrier's heartbeat row (and, in singleton mode, its lock connection) is refreshed.
    #[serde(deserialize_with = "de_duration")]
    pub heartbeat: Duration,
    /// How often the retrier applies the store's retention
    /// ([`PgConfig::retention`](crate::PgConfig::retention)) and refreshes its saturation gauge.
    #[serde(deserialize_with = "de_duration")]
    pub purge_interval: Duration,
    /// Recorded as `lease_owner` and in the heartbeat row; `host:pid` when empty.
    pub owner: String,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_retries: None,
            batch_size: 50,
            fixed_rate: None,
            poll_interval: Duration::from_secs(5),
            concurrency: 16,
            workers: 1,
            lease: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(30),
            singleton: false,
            heartbeat: Duration::from_secs(10),
            purge_interval: Duration::from_secs(3600),
            owner: String::new(),
        }
    }
}

#[derive(Deserialize)]
struct Document {
    dlq: Section,
}

#[derive(Deserialize)]
struct Section {
    retry: RetryConfig,
}

impl RetryConfig {
    /// Parses JSON: either `{"dlq": {"retry": {...}}}` or the `retry` object itself. Keys are
    /// kebab-case; durations are strings with a unit (`"500ms"`, `"30s"`, `"6h"`, `"1d"`) or
    /// integer milliseconds (`21600000`).
    ///
    /// # Errors
    /// [`Error::ConfigParse`] for malformed JSON, unknown keys or bad values.
    pub fn from_json_str(json: &str) -> Result<Self, Error> {
        let parse_err = |source| Error::ConfigParse { path: "<string>".into(), source };
        let value: serde_json::Value = serde_json::from_str(json).map_err(parse_err)?;
        if value.get("dlq").is_some() {
            return serde_json::from_value::<Document>(value).map(|d| d.dlq.retry).map_err(parse_err);
        }
        serde_json::from_value(value).map_err(parse_err)
    }

    /// Reads [`from_json_str`](Self::from_json_str) from a file.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when the file cannot be read, [`Error::ConfigParse`] otherwise.
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigFile { path: shown.clone(), source })?;
        Self::from_json_str(&text).map_err(|e| match e {
            Error::ConfigParse { source, .. } => Error::ConfigParse { path: shown, source },
            other => other,
        })
    }

    /// The defaults overridden by the environment (see [`with_env`](Self::with_env)).
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value does not parse.
    pub fn from_env() -> Result<Self, Error> {
        Self::default().with_env()
    }

    /// Overrides fields from `DLQ_RETRY_ENABLED`, `DLQ_RETRY_MAX_RETRIES`,
    /// `DLQ_RETRY_BATCH_SIZE`, `DLQ_RETRY_FIXED_RATE`, `DLQ_RETRY_POLL_INTERVAL`,
    /// `DLQ_RETRY_CONCURRENCY`, `DLQ_RETRY_LEASE` and `DLQ_RETRY_SINGLETON`, where set.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value does not parse.
    ///
    /// ```
    /// let config = dlq_sqlx::RetryConfig::default().with_vars(|name| match name {
    ///     "DLQ_RETRY_FIXED_RATE" => Some("21600000".into()),
    ///     "DLQ_RETRY_ENABLED" => Some("false".into()),
    ///     _ => None,
    /// })?;
    /// assert_eq!(config.fixed_rate, Some(std::time::Duration::from_secs(21600)));
    /// assert!(!config.enabled);
    /// # Ok::<(), dlq_sqlx::Error>(())
    /// ```
    pub fn with_env(self) -> Result<Self, Error> {
        self.with_vars(|name| std::env::var(name).ok())
    }

    /// Like [`with_env`](Self::with_env), reading variables through `var` (for tests).
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value does not parse.
    pub fn with_vars(mut self, var: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = get("DLQ_RETRY_ENABLED") {
            self.enabled = parse_bool("DLQ_RETRY_ENABLED", &v)?;
        }
        if let Some(v) = get("DLQ_RETRY_MAX_RETRIES") {
            self.max_retries = Some(parse_num("DLQ_RETRY_MAX_RETRIES", &v)?);
        }
        if let Some(v) = get("DLQ_RETRY_BATCH_SIZE") {
            self.batch_size = parse_num("DLQ_RETRY_BATCH_SIZE", &v)?;
        }
        if let Some(v) = get("DLQ_RETRY_FIXED_RATE") {
            self.fixed_rate = parse_opt_duration_var("DLQ_RETRY_FIXED_RATE", &v)?;
        }
        if let Some(v) = get("DLQ_RETRY_POLL_INTERVAL") {
            self.poll_interval = parse_duration_var("DLQ_RETRY_POLL_INTERVAL", &v)?;
        }
        if let Some(v) = get("DLQ_RETRY_CONCURRENCY") {
            self.concurrency = parse_num("DLQ_RETRY_CONCURRENCY", &v)?;
        }
        if let Some(v) = get("DLQ_RETRY_LEASE") {
            self.lease = parse_duration_var("DLQ_RETRY_LEASE", &v)?;
        }
        if let Some(v) = get("DLQ_RETRY_SINGLETON") {
            self.singleton = parse_bool("DLQ_RETRY_SINGLETON", &v)?;
        }
        Ok(self)
    }
}

fn config_err(key: &str, value: &str, reason: impl Into<String>) -> Error {
    Error::Config { key: key.to_owned(), value: value.to_owned(), reason: reason.into() }
}

fn parse_bool(key: &str, value: &str) -> Result<bool, Error> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        _ => Err(config_err(key, value, "expected true or false")),
    }
}

fn parse_num<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, Error>
where
    T::Err: std::fmt::Display,
{
    value.trim().parse().map_err(|e: T::Err| config_err(key, value, e.to_string()))
}

fn parse_duration_var(key: &str, value: &str) -> Result<Duration, Error> {
    parse_duration(value).map_err(|reason| config_err(key, value, reason))
}

fn parse_opt_duration_var(key: &str, value: &str) -> Result<Option<Duration>, Error> {
    match value.trim() {
        "off" | "none" | "never" => Ok(None),
        _ => parse_duration_var(key, value).map(Some),
    }
}

/// Parses a duration: an integer number of milliseconds (`21600000`, as Spring writes
/// `fixed-rate`), or a number with a unit: `ms`, `s`, `m`, `h`, `d` (`"500ms"`, `"6h"`).
///
/// # Errors
/// A lowercase message saying what was expected.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(dlq_sqlx::parse_duration("6h"), Ok(Duration::from_secs(21600)));
/// assert_eq!(dlq_sqlx::parse_duration("21600000"), Ok(Duration::from_secs(21600)));
/// assert_eq!(dlq_sqlx::parse_duration("250ms"), Ok(Duration::from_millis(250)));
/// assert!(dlq_sqlx::parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("expected a number with a unit (ms, s, m, h, d), got {text:?}"))?;
    let secs = |mult: u64| n.checked_mul(mult).map(Duration::from_secs);
    let duration = match unit.trim() {
        "" | "ms" => Some(Duration::from_millis(n)),
        "s" => secs(1),
        "m" | "min" => secs(60),
        "h" => secs(3600),
        "d" => secs(86_400),
        other => return Err(format!("unknown unit {other:?}: expected ms, s, m, h or d")),
    };
    duration.ok_or_else(|| format!("duration {text:?} is too large"))
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Millis(u64),
    Text(String),
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    match RawDuration::deserialize(d)? {
        RawDuration::Millis(ms) => Ok(Duration::from_millis(ms)),
        RawDuration::Text(text) => parse_duration(&text).map_err(serde::de::Error::custom),
    }
}

fn de_opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    match Option::<RawDuration>::deserialize(d)? {
        None => Ok(None),
        Some(RawDuration::Millis(ms)) => Ok(Some(Duration::from_millis(ms))),
        Some(RawDuration::Text(text)) => parse_duration(&text).map(Some).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_configuration_parses() {
        let config = RetryConfig::from_json_str(
            r#"{"dlq":{"retry":{"enabled":true,"max-retries":240,"batch-size":50,"fixed-rate":21600000}}}"#,
        )
        .unwrap();
        assert!(config.enabled);
        assert_eq!(config.batch_size, 50);
        assert_eq!(config.fixed_rate, Some(Duration::from_secs(6 * 3600)));
    }

    #[test]
    fn bare_section_and_unknown_keys() {
        let config = RetryConfig::from_json_str(r#"{"batch-size": 7, "fixed-rate": null}"#).unwrap();
        assert_eq!(config.batch_size, 7);
        assert_eq!(config.fixed_rate, None);
        let err = RetryConfig::from_json_str(r#"{"batch_size": 7}"#).unwrap_err();
        assert!(matches!(err, Error::ConfigParse { .. }), "{err:?}");
    }

    #[test]
    fn env_values_are_checked() {
        let err = RetryConfig::default()
            .with_vars(|n| (n == "DLQ_RETRY_BATCH_SIZE").then(|| "fifty".to_owned()))
            .unwrap_err();
        assert!(err.to_string().contains("DLQ_RETRY_BATCH_SIZE"), "{err}");
        let config = RetryConfig::default()
            .with_vars(|n| match n {
                "DLQ_RETRY_MAX_RETRIES" => Some("3".into()),
                "DLQ_RETRY_FIXED_RATE" => Some("6h".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!(config.max_retries, Some(3));
        assert_eq!(config.fixed_rate, Some(Duration::from_secs(21600)));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2d"), Ok(Duration::from_secs(172_800)));
        assert!(parse_duration("5 fortnights").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999h").is_err());
    }
}
