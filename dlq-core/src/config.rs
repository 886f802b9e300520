//! [`RetrierConfig`]: how a [`Retrier`](crate::Retrier) runs, and loading it from JSON, TOML
//! and `DLQ_RETRY_*` environment variables.

use std::path::Path;
use std::time::Duration;

use figment::providers::{Env, Format, Json, Serialized, Toml};
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};

use std::collections::BTreeMap;

use crate::{Error, breaker_config::BreakerConfig};

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
/// - `immediate-retries`: a transient failure whose retry is due at once (`backoff = "none"`)
///   is run again under the same claim, up to this many times, before the outcome is written:
///   one write instead of a write and a claim per attempt. Each attempt still counts and is
///   recorded in the history; `0` writes every attempt before the next.
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
///
/// # Building one
///
/// The struct is `#[non_exhaustive]`, so that a knob added in a later release breaks no
/// caller. The price: outside this crate it cannot be written as a struct literal, not even
/// one that ends in `..RetrierConfig::default()` (the compiler refuses with E0639, "cannot
/// create non-exhaustive struct using struct expression"):
///
/// ```compile_fail,E0639
/// use dlq_core::RetrierConfig;
///
/// let config = RetrierConfig { batch_size: 20, ..RetrierConfig::default() };
/// ```
///
/// Its fields are public, so start from [`RetrierConfig::default()`] and set the ones to
/// change:
///
/// ```
/// use dlq_core::RetrierConfig;
/// use std::time::Duration;
///
/// let mut config = RetrierConfig::default();
/// config.batch_size = 20;
/// config.lease = Duration::from_secs(60);
/// config.retention = None; // keep finished rows
/// config.validate()?;
/// # Ok::<(), dlq_core::Error>(())
/// ```
///
/// Or load it, every key optional: [`from_json_str`](Self::from_json_str),
/// [`from_toml_str`](Self::from_toml_str), [`from_file`](Self::from_file) (`.json` or
/// `.toml`), [`from_env`](Self::from_env) (`DLQ_RETRY_*` variables over the defaults) and
/// [`with_env`](Self::with_env) (the variables over a loaded configuration):
///
/// ```
/// use dlq_core::RetrierConfig;
///
/// # figment::Jail::expect_with(|jail| {
/// # jail.create_file("dlq.toml", "[dlq.retry]\nbatch-size = 20\n")?;
/// # jail.set_env("DLQ_RETRY_LEASE", "1m");
/// # let run = || -> Result<(), dlq_core::Error> {
/// // With `batch-size = 20` under `[dlq.retry]` in dlq.toml, and DLQ_RETRY_LEASE=1m:
/// let config = RetrierConfig::from_file("dlq.toml")?.with_env()?;
/// assert_eq!((config.batch_size, config.lease.as_secs()), (20, 60));
///
/// let config = RetrierConfig::from_env()?;
/// assert_eq!((config.batch_size, config.lease.as_secs()), (50, 60));
///
/// assert_eq!(RetrierConfig::from_toml_str("batch-size = 20")?, RetrierConfig::from_json_str(r#"{"batch-size": 20}"#)?);
/// # Ok(()) };
/// # run().map_err(|e| e.to_string())?;
/// # Ok(()) });
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RetrierConfig {
    /// Whether the retrier runs at all; when `false`, [`run_until`](crate::Retrier::run_until)
    /// returns at once.
    pub enabled: bool,
    /// Overrides the retry limit stored with each row (the reference design uses 240).
    #[serde(deserialize_with = "de_opt_count")]
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
    /// How many times a transient failure whose retry is due at once (the handler's backoff
    /// gives no wait) is run again under the same claim before its outcome is written. Only
    /// while the claim has more than half its lease left (after the handler's `timeout`), the
    /// type's circuit admits it and the retrier is not stopping; never for a type with a
    /// `max-rate`, whose attempts its claims pace, nor for a circuit's trial.
    pub immediate_retries: u32,
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
    /// The circuit breaker and limits of every event type without an entry in `breakers`;
    /// `None` (the default): no breaker. See [`BreakerConfig`] and `docs/BREAKER.md`.
    pub breaker: Option<BreakerConfig>,
    /// The circuit breaker and limits of named event types.
    pub breakers: BTreeMap<String, BreakerConfig>,
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
            immediate_retries: 2,
            shutdown_grace: Duration::from_secs(30),
            singleton: false,
            heartbeat: Duration::from_secs(10),
            retention: Some(Duration::from_secs(7 * 24 * 3600)),
            purge_interval: Duration::from_secs(3600),
            owner: String::new(),
            breaker: None,
            breakers: BTreeMap::new(),
        }
    }
}

impl RetrierConfig {
    /// The breaker of `event_type` by the configuration alone: its entry in `breakers`, else
    /// `breaker`. A retrier also weighs the handler's `breaker = "..."`: see
    /// [`resolve_breaker`](Self::resolve_breaker).
    ///
    /// ```
    /// let config = dlq_core::RetrierConfig::from_json_str(r#"{"breakers": {"payment": "20% of 10 in 30s"}}"#)?;
    /// assert_eq!(config.breaker_for("payment").unwrap().threshold_percent, 20);
    /// assert!(config.breaker_for("refund").is_none());
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn breaker_for(&self, event_type: &str) -> Option<&BreakerConfig> {
        self.resolve_breaker(event_type, None)
    }

    /// The breaker a retrier gives `event_type`, whose handler's attribute sets `attribute`
    /// ([`Registration::breaker`](crate::handlers::Registration::breaker)). The first that is there wins:
    /// 1. the type's entry in `breakers`: configuration over code, so an operator can change
    ///    or turn off (`enabled = false`) a breaker without a release;
    /// 2. the attribute's `breaker = "..."`;
    /// 3. the default `breaker`, for types with neither.
    ///
    /// ```
    /// use dlq_core::{retry::BreakerConfig, RetrierConfig};
    ///
    /// let config = RetrierConfig::from_json_str(r#"{"breaker": "90%", "breakers": {"payment": "20%"}}"#)?;
    /// let attribute = BreakerConfig::parse_rule("50% of 20 in 1m").unwrap();
    /// assert_eq!(config.resolve_breaker("payment", Some(&attribute)).unwrap().threshold_percent, 20);
    /// assert_eq!(config.resolve_breaker("refund", Some(&attribute)).unwrap().threshold_percent, 50);
    /// assert_eq!(config.resolve_breaker("refund", None).unwrap().threshold_percent, 90);
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn resolve_breaker<'a>(
        &'a self,
        event_type: &str,
        attribute: Option<&'a BreakerConfig>,
    ) -> Option<&'a BreakerConfig> {
        self.breakers.get(event_type).or(attribute).or(self.breaker.as_ref())
    }

    /// Parses JSON: either `{"dlq": {"retry": {...}}}` or the `retry` object itself.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key (`dlq.retry.batch-size`) whose value is wrong, or the
    /// unknown key.
    pub fn from_json_str(json: &str) -> Result<Self, Error> {
        Self::load(Json::string(json), None)
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
        Self::load(Toml::string(toml), None)
    }

    /// Reads a `.json` or `.toml` file (by its extension; JSON otherwise). Combine it with the
    /// environment as `RetrierConfig::from_file(path)?.with_env()?`.
    ///
    /// # Errors
    /// [`Error::ConfigFile`] when the file cannot be read; [`Error::Config`] naming the file
    /// and the key otherwise.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        // Read it here: a missing file is an error, not an empty configuration.
        let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigFile { path: shown.clone(), source })?;
        if path.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml")) {
            Self::load(Toml::string(&text), Some(shown))
        } else {
            Self::load(Json::string(&text), Some(shown))
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
    /// [`Error::Config`] naming the variable whose value does not parse, or an unknown
    /// `DLQ_RETRY_*` variable (a typo would otherwise be ignored).
    ///
    /// ```
    /// // DLQ_RETRY_BATCH_SIZE=20 DLQ_RETRY_FIXED_RATE=6h DLQ_RETRY_RETENTION=off
    /// let config = dlq_core::RetrierConfig::from_toml_str("lease = \"1m\"")?.with_env()?;
    /// assert_eq!(config.lease, std::time::Duration::from_secs(60));
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    pub fn with_env(self) -> Result<Self, Error> {
        let env = Env::prefixed(ENV_PREFIX).map(|key| key.as_str().replace('_', "-").into());
        Figment::from(Serialized::defaults(self)).merge(env).extract().map_err(|e| {
            let key = format!("{ENV_PREFIX}{}", e.path.join("_").replace('-', "_").to_ascii_uppercase());
            Error::Config { key, file: None, reason: e.kind.to_string() }
        })
    }

    /// Checks values the types allow but a retrier cannot use (zero sizes and periods).
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    ///
    /// ```
    /// let config = dlq_core::RetrierConfig::from_json_str(r#"{"batch-size": 0}"#)?;
    /// assert!(config.validate().unwrap_err().to_string().contains("batch-size"));
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
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
        if let Some(breaker) = &self.breaker {
            breaker.validate("breaker")?;
        }
        for (event_type, breaker) in &self.breakers {
            breaker.validate(&format!("breakers.{event_type}"))?;
        }
        let counts = [("batch-size", self.batch_size), ("concurrency", self.concurrency), ("workers", self.workers)];
        match counts.into_iter().find(|(_, n)| *n == 0) {
            Some((key, _)) => Err(zero(key)),
            None => Ok(()),
        }
    }

    /// The defaults, overridden by `source`'s `dlq.retry` section or, without a `dlq` key, by
    /// its top level.
    fn load(source: impl Provider, file: Option<String>) -> Result<Self, Error> {
        let source = Figment::from(source);
        let (source, prefix) =
            if source.contains("dlq") { (source.focus("dlq.retry"), "dlq.retry.") } else { (source, "") };
        Figment::from(Serialized::defaults(Self::default())).merge(source).extract().map_err(|e| Error::Config {
            key: if e.path.is_empty() { String::new() } else { format!("{prefix}{}", e.path.join(".")) },
            file,
            reason: e.kind.to_string(),
        })
    }
}

/// The prefix of the environment variables [`RetrierConfig::with_env`] reads.
const ENV_PREFIX: &str = "DLQ_RETRY_";

/// `off`, `none`, `never` and `null`: no value, for the optional keys.
fn is_off(text: &str) -> bool {
    ["off", "none", "never", "null"].iter().any(|off| text.trim().eq_ignore_ascii_case(off))
}

fn millis(d: &Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(crate) fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
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

pub(crate) fn de_opt_duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    match Option::<RawDuration>::deserialize(d)? {
        Some(RawDuration::Text(text)) if is_off(&text) => Ok(None),
        raw => raw.map(parse).transpose().map_err(serde::de::Error::custom),
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawCount {
    Count(u32),
    Text(String),
}

fn de_opt_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<RawCount>::deserialize(d)? {
        None => Ok(None),
        Some(RawCount::Count(n)) => Ok(Some(n)),
        Some(RawCount::Text(text)) if is_off(&text) => Ok(None),
        Some(RawCount::Text(text)) => {
            Err(serde::de::Error::custom(format!("expected a number or \"off\", found {text:?}")))
        }
    }
}

#[cfg(test)]
#[allow(clippy::result_large_err, reason = "figment::Jail closures return figment::Error")]
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
    fn breaker_precedence_is_config_per_type_then_attribute_then_config_default() {
        let percent = |b: Option<&BreakerConfig>| b.map(|b| b.threshold_percent);
        let attribute = BreakerConfig::parse_rule("30% of 5 in 10s").unwrap();
        let none = RetrierConfig::default();
        assert_eq!(percent(none.resolve_breaker("payment", None)), None);
        assert_eq!(percent(none.resolve_breaker("payment", Some(&attribute))), Some(30));

        let config = RetrierConfig::from_json_str(r#"{"breaker": "90%", "breakers": {"payment": "10%"}}"#).unwrap();
        assert_eq!(percent(config.resolve_breaker("payment", Some(&attribute))), Some(10), "per type over attribute");
        assert_eq!(percent(config.resolve_breaker("refund", Some(&attribute))), Some(30), "attribute over default");
        assert_eq!(percent(config.resolve_breaker("refund", None)), Some(90), "default for types with neither");
        assert_eq!(percent(config.breaker_for("refund")), Some(90), "`breaker_for` is the configuration alone");

        let off = RetrierConfig::from_json_str(r#"{"breakers": {"payment": {"enabled": false}}}"#).unwrap();
        let resolved = off.resolve_breaker("payment", Some(&attribute)).unwrap();
        assert!(!resolved.enabled, "an operator can turn off the breaker a handler asks for");
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
        figment::Jail::expect_with(|jail| {
            jail.set_env("DLQ_RETRY_BATCH_SIZE", "fifty");
            let err = RetrierConfig::from_env().unwrap_err();
            assert!(err.to_string().contains("DLQ_RETRY_BATCH_SIZE"), "{err}");

            jail.set_env("DLQ_RETRY_BATCH_SIZE", "20");
            jail.set_env("DLQ_RETRY_MAX_RETRIES", "3");
            jail.set_env("DLQ_RETRY_RETENTION", "off");
            jail.set_env("DLQ_RETRY_OWNER", "worker-1");
            jail.set_env("DLQ_RETRY_PURGE_INTERVAL", "1h 30m");
            jail.set_env("DLQ_RETRY_FIXED_RATE", "21600000");
            jail.set_env("DLQ_RETRY_ENABLED", "false");
            jail.set_env("DLQ_RETRY_IMMEDIATE_RETRIES", "0");
            let config =
                RetrierConfig::from_toml_str("lease = \"1m\"\nheartbeat = \"2s\"").unwrap().with_env().unwrap();
            assert_eq!((config.batch_size, config.max_retries, config.retention), (20, Some(3), None));
            assert_eq!((config.owner.as_str(), config.purge_interval), ("worker-1", Duration::from_secs(5400)));
            assert_eq!((config.fixed_rate, config.enabled), (Some(Duration::from_secs(21600)), false));
            assert_eq!((config.lease, config.heartbeat), (Duration::from_secs(60), Duration::from_secs(2)), "kept");
            assert_eq!(config.immediate_retries, 0);
            assert_eq!(config.concurrency, 16, "untouched keys keep their defaults");

            jail.set_env("DLQ_RETRY_MAX_RETRIES", "off");
            jail.set_env("DLQ_RETRY_BACH_SIZE", "7");
            let err = RetrierConfig::from_env().unwrap_err();
            assert!(err.to_string().contains("DLQ_RETRY_BACH_SIZE"), "a typo is an error: {err}");
            Ok(())
        });
    }

    #[test]
    fn every_field_round_trips_through_the_environment_names() {
        // A new field is read from the environment without a list to update: the names come
        // from the serialized keys.
        let keys = serde_json::to_value(RetrierConfig::default()).unwrap();
        let keys: Vec<String> = keys.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys.len(), 17, "{keys:?}");
        figment::Jail::expect_with(|jail| {
            for key in &keys {
                jail.set_env(format!("DLQ_RETRY_{}", key.replace('-', "_").to_ascii_uppercase()), "nonsense value");
            }
            let err = RetrierConfig::from_env().unwrap_err();
            assert!(err.to_string().contains("DLQ_RETRY_"), "{err}");
            Ok(())
        });
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
