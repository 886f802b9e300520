//! [`RetrierConfig`]: how a [`Retrier`](crate::Retrier) runs, and loading it from JSON, TOML
//! and `DLQ_RETRY_*` environment variables.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::Error;

/// How a [`Retrier`](crate::Retrier) runs: the `dlq.retry` section of a configuration.
///
/// Every field has a default, so a file names only what it changes. Keys are kebab-case;
/// durations are text with units (`"500ms"`, `"30s"`, `"1h 30m"`, `"7d"`, parsed by
/// `humantime`) or integer milliseconds (`21600000`, as Spring writes `fixed-rate`).
///
/// What each knob trades:
/// - `workers` × `batch-size` rows are in flight at once; `workers` claim loops overlap the
///   database round trips of one batch with the handlers of another (4 by default: a single
///   loop drains at about half the rate on a 2-core machine); `concurrency` caps the handlers
///   run at once per batch. Raise them for fast handlers; lower them to spare a downstream.
/// - `lease` must outlast the longest handler run (and its `timeout`): a row whose lease
///   expires is claimed again by another retrier.
/// - `poll-interval` bounds how late a row that became due without a wake-up (a retry delay
///   elapsing) is picked up; parks and redrives wake retriers at once on PostgreSQL.
/// - `fixed-rate` switches to the classic scheduler: one batch every period, nothing between.
/// - `heartbeat` is how often the retrier's row in the store is refreshed; a row not
///   refreshed for three heartbeats belongs to a dead retrier and is removed by the others.
/// - `retention` purges `SUCCEEDED` and `DISCARDED` rows older than it, every
///   `purge-interval`; `null` keeps them.
/// - `singleton` runs one retrier at a time across all processes (PostgreSQL only).
///
/// ```
/// use dlq_core::RetrierConfig;
/// use std::time::Duration;
///
/// // The scheduler of the reference design: every 6 h, 50 events, 240 retries.
/// let config = RetrierConfig::from_json_str(r#"{
///     "dlq": { "retry": { "enabled": true, "max-retries": 240, "batch-size": 50, "fixed-rate": "6h" } }
/// }"#)?;
/// assert_eq!(config.fixed_rate, Some(Duration::from_secs(6 * 3600)));
/// assert_eq!(config.max_retries, Some(240));
/// assert_eq!(config.lease, Duration::from_secs(300)); // the default
/// # Ok::<(), dlq_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RetrierConfig {
    /// Whether the retrier runs at all; when `false`, [`run_until`](crate::Retrier::run_until)
    /// returns at once.
    pub enabled: bool,
    /// Overrides the retry limit stored with each row (the reference design uses 240).
    pub max_retries: Option<u32>,
    /// Rows claimed at once.
    pub batch_size: usize,
    /// Handlers run at once within a batch.
    pub concurrency: usize,
    /// Claim loops run at once.
    pub workers: usize,
    /// When set, claim one batch every period instead of draining continuously.
    #[serde(deserialize_with = "de_opt_duration", serialize_with = "ser_opt_duration")]
    pub fixed_rate: Option<Duration>,
    /// In continuous mode, the longest wait between looks when no wake-up arrives.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub poll_interval: Duration,
    /// How long a claim holds a row.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub lease: Duration,
    /// How long in-flight handlers may finish after shutdown before their rows are released.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub shutdown_grace: Duration,
    /// Run one instance at a time across all processes, elected by the store's lock
    /// (a PostgreSQL advisory lock).
    pub singleton: bool,
    /// How often the retrier's heartbeat row (and, in singleton mode, its lock) is refreshed.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub heartbeat: Duration,
    /// `SUCCEEDED` and `DISCARDED` rows older than this are purged; `None` keeps them.
    #[serde(deserialize_with = "de_opt_duration", serialize_with = "ser_opt_duration")]
    pub retention: Option<Duration>,
    /// How often retention runs.
    #[serde(deserialize_with = "de_duration", serialize_with = "ser_duration")]
    pub purge_interval: Duration,
    /// Recorded as `lease_owner` and in the heartbeat row; `host:pid:<random>` when empty.
    pub owner: String,
}

impl Default for RetrierConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_retries: None,
            batch_size: 50,
            concurrency: 16,
            workers: 4,
            fixed_rate: None,
            poll_interval: Duration::from_secs(5),
            lease: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(30),
            singleton: false,
            heartbeat: Duration::from_secs(10),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
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
    retry: RetrierConfig,
}

impl RetrierConfig {
    /// Parses JSON: either `{"dlq": {"retry": {...}}}` or the `retry` object itself.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key (`dlq.retry.batch-size`) whose value is wrong, or the
    /// unknown key.
    pub fn from_json_str(json: &str) -> Result<Self, Error> {
        Self::parse_json(json, None)
    }

    /// Parses TOML: either a `[dlq.retry]` table or the keys at the top level.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key whose value is wrong, or the unknown key.
    ///
    /// ```
    /// let config = dlq_core::RetrierConfig::from_toml_str("[dlq.retry]\nbatch-size = 20\nretention = \"3d\"\n")?;
    /// assert_eq!(config.batch_size, 20);
    /// let err = dlq_core::RetrierConfig::from_toml_str("batch-size = \"fifty\"").unwrap_err();
    /// assert!(err.to_string().contains("batch-size"), "{err}");
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn from_toml_str(toml: &str) -> Result<Self, Error> {
        Self::parse_toml(toml, None)
    }

    /// Reads a `.json` or `.toml` file (by its extension; JSON otherwise).
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when the file cannot be read; [`Error::Config`] naming the file
    /// and the key otherwise.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigFile { path: shown.clone(), source })?;
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml")) {
            Self::parse_toml(&text, Some(shown))
        } else {
            Self::parse_json(&text, Some(shown))
        }
    }

    /// The defaults overridden by the environment (see [`with_env`](Self::with_env)).
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value does not parse.
    pub fn from_env() -> Result<Self, Error> {
        Self::default().with_env()
    }

    /// Overrides every field whose variable is set: `DLQ_RETRY_` and the key in upper snake
    /// case (`DLQ_RETRY_BATCH_SIZE`, `DLQ_RETRY_FIXED_RATE`, `DLQ_RETRY_RETENTION`, ...).
    /// `off`, `none` or `never` unset `fixed-rate`, `retention` and `max-retries`.
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value does not parse.
    pub fn with_env(self) -> Result<Self, Error> {
        self.with_vars(|name| std::env::var(name).ok())
    }

    /// Like [`with_env`](Self::with_env), reading variables through `var` (for tests).
    ///
    /// # Errors
    /// [`Error::Config`] naming the variable whose value does not parse.
    ///
    /// ```
    /// let config = dlq_core::RetrierConfig::default().with_vars(|name| match name {
    ///     "DLQ_RETRY_FIXED_RATE" => Some("21600000".into()),
    ///     "DLQ_RETRY_ENABLED" => Some("false".into()),
    ///     "DLQ_RETRY_SHUTDOWN_GRACE" => Some("1m".into()),
    ///     _ => None,
    /// })?;
    /// assert_eq!(config.fixed_rate, Some(std::time::Duration::from_secs(21600)));
    /// assert_eq!(config.shutdown_grace, std::time::Duration::from_secs(60));
    /// assert!(!config.enabled);
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn with_vars(self, var: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        // The config as the JSON its deserializer reads back: its keys are every field.
        let mut fields = match serde_json::to_value(&self).map_err(Error::Serialize)? {
            serde_json::Value::Object(fields) => fields,
            _ => serde_json::Map::new(), // a struct always serializes to an object
        };
        let keys: Vec<String> = fields.keys().cloned().collect();
        for key in keys {
            let name = format!("DLQ_RETRY_{}", key.replace('-', "_").to_ascii_uppercase());
            let Some(text) = var(&name).filter(|v| !v.trim().is_empty()) else { continue };
            let value = env_value(&text);
            // Check each variable alone, so the error names it.
            let one = serde_json::Value::Object(std::iter::once((key.clone(), value.clone())).collect());
            serde_json::from_value::<Self>(one).map_err(|e| Error::Config {
                key: name,
                file: None,
                reason: format!("{e} (value {text:?})"),
            })?;
            fields.insert(key, value);
        }
        serde_json::from_value(fields.into()).map_err(|e| Error::Config {
            key: "DLQ_RETRY_*".into(),
            file: None,
            reason: e.to_string(),
        })
    }

    /// Checks values the types allow but a retrier cannot use (zero sizes and periods).
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<(), Error> {
        let zero = |key: &str| Error::Config { key: key.into(), file: None, reason: "must be above zero".into() };
        let durations = [
            ("poll-interval", self.poll_interval),
            ("lease", self.lease),
            ("heartbeat", self.heartbeat),
            ("purge-interval", self.purge_interval),
            ("fixed-rate", self.fixed_rate.unwrap_or(Duration::MAX)),
        ];
        if let Some((key, _)) = durations.into_iter().find(|(_, d)| d.is_zero()) {
            return Err(zero(key));
        }
        let counts = [("batch-size", self.batch_size), ("concurrency", self.concurrency), ("workers", self.workers)];
        match counts.into_iter().find(|(_, n)| *n == 0) {
            Some((key, _)) => Err(zero(key)),
            None => Ok(()),
        }
    }

    fn parse_json(json: &str, file: Option<String>) -> Result<Self, Error> {
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| Error::Config {
            key: String::new(),
            file: file.clone(),
            reason: e.to_string(),
        })?;
        if value.get("dlq").is_some() {
            let doc: Document = path_error(serde_path_to_error::deserialize(value), &file)?;
            return Ok(doc.dlq.retry);
        }
        path_error(serde_path_to_error::deserialize(value), &file)
    }

    fn parse_toml(text: &str, file: Option<String>) -> Result<Self, Error> {
        let value: toml::Table = text.parse().map_err(|e: toml::de::Error| Error::Config {
            key: String::new(),
            file: file.clone(),
            reason: e.to_string(),
        })?;
        if value.contains_key("dlq") {
            let doc: Document = path_error(serde_path_to_error::deserialize(value), &file)?;
            return Ok(doc.dlq.retry);
        }
        path_error(serde_path_to_error::deserialize(value), &file)
    }
}

fn path_error<T, E: std::fmt::Display>(
    result: Result<T, serde_path_to_error::Error<E>>,
    file: &Option<String>,
) -> Result<T, Error> {
    result.map_err(|e| Error::Config { key: e.path().to_string(), file: file.clone(), reason: e.inner().to_string() })
}

/// An environment value as JSON: a number or boolean when it reads as one, text otherwise.
fn env_value(text: &str) -> serde_json::Value {
    let text = text.trim();
    match text {
        "off" | "none" | "never" | "null" => serde_json::Value::Null,
        _ => serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .filter(|v| v.is_number() || v.is_boolean())
            .unwrap_or_else(|| serde_json::Value::String(text.to_owned())),
    }
}

fn millis(d: &Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(millis(d))
}

#[allow(clippy::ref_option, reason = "the signature serde's `serialize_with` calls")]
fn ser_opt_duration<S: serde::Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
    d.as_ref().map(millis).serialize(s)
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawDuration {
    Millis(u64),
    Text(String),
}

fn parse(raw: RawDuration) -> Result<Duration, String> {
    match raw {
        RawDuration::Millis(ms) => Ok(Duration::from_millis(ms)),
        RawDuration::Text(text) => humantime::parse_duration(text.trim())
            .map_err(|e| format!("{e}: expected a duration such as \"500ms\", \"30s\", \"6h\" or \"7d\"")),
    }
}

fn de_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse(RawDuration::deserialize(d)?).map_err(serde::de::Error::custom)
}

fn de_opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    Option::<RawDuration>::deserialize(d)?.map(parse).transpose().map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_configuration_parses() {
        let config = RetrierConfig::from_json_str(
            r#"{"dlq":{"retry":{"enabled":true,"max-retries":240,"batch-size":50,"fixed-rate":21600000}}}"#,
        )
        .unwrap();
        assert!(config.enabled);
        assert_eq!(config.batch_size, 50);
        assert_eq!(config.fixed_rate, Some(Duration::from_secs(6 * 3600)));
    }

    #[test]
    fn errors_name_the_key_and_the_file() {
        let err = RetrierConfig::from_json_str(r#"{"dlq":{"retry":{"batch-size":"fifty"}}}"#).unwrap_err();
        assert!(err.to_string().contains("dlq.retry.batch-size"), "{err}");
        let err = RetrierConfig::from_json_str(r#"{"batch_size": 7}"#).unwrap_err();
        assert!(err.to_string().contains("batch_size"), "{err}");
        let dir = std::env::temp_dir().join(format!("dlq-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("dlq.toml");
        std::fs::write(&file, "[dlq.retry]\nlease = \"soon\"\n").unwrap();
        let err = RetrierConfig::from_file(&file).unwrap_err().to_string();
        assert!(err.contains("dlq.retry.lease") && err.contains("dlq.toml"), "{err}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn env_covers_every_key_and_names_the_variable() {
        let err =
            RetrierConfig::default().with_vars(|n| (n == "DLQ_RETRY_BATCH_SIZE").then(|| "fifty".into())).unwrap_err();
        assert!(err.to_string().contains("DLQ_RETRY_BATCH_SIZE"), "{err}");
        let config = RetrierConfig::default()
            .with_vars(|n| match n {
                "DLQ_RETRY_MAX_RETRIES" => Some("3".into()),
                "DLQ_RETRY_RETENTION" => Some("off".into()),
                "DLQ_RETRY_OWNER" => Some("worker-1".into()),
                "DLQ_RETRY_PURGE_INTERVAL" => Some("1h 30m".into()),
                _ => None,
            })
            .unwrap();
        assert_eq!((config.max_retries, config.retention), (Some(3), None));
        assert_eq!((config.owner.as_str(), config.purge_interval), ("worker-1", Duration::from_secs(5400)));
        assert_eq!(config.batch_size, 50, "untouched keys keep their values");
    }

    #[test]
    fn zero_values_are_refused() {
        let config = RetrierConfig { batch_size: 0, ..RetrierConfig::default() };
        assert!(config.validate().unwrap_err().to_string().contains("batch-size"));
        let config = RetrierConfig { fixed_rate: Some(Duration::ZERO), ..RetrierConfig::default() };
        assert!(config.validate().unwrap_err().to_string().contains("fixed-rate"));
        assert!(RetrierConfig::default().validate().is_ok());
    }
}
