//! [`BreakerConfig`]: when an event type's circuit opens, how long it stays open, how the rate
//! ramps back up, and the type's limits. The design is in `docs/BREAKER.md`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The circuit breaker and limits of one event type (or the default of every type): the
/// `breaker` and `breakers.<type>` sections of a [`RetrierConfig`](crate::RetrierConfig).
///
/// The circuit opens when, within `window`, at least `min-calls` retries of the type ran on
/// one retrier and at least `threshold` percent of them failed transiently. While open, no
/// retrier claims the type and no retry count is spent; after `cool-down` one trial row runs;
/// success closes the circuit and the rate ramps from `ramp-from` rows/s up over `ramp`;
/// failure re-opens it with the cool-down doubled, up to `max-cool-down`.
///
/// Written as a short rule (`"50% of 20 in 1m"`), or as keys; keys not given keep their
/// defaults, shown here:
///
/// ```
/// use dlq_core::{retry::BreakerConfig, RetrierConfig};
/// use std::time::Duration;
///
/// let config = RetrierConfig::from_toml_str(r#"
///     [dlq.retry]
///     breaker = "50% of 20 in 1m"
///
///     [dlq.retry.breakers.payment]
///     threshold = "25%"
///     min-calls = 10
///     window = "30s"
///     cool-down = "5s"
///     max-cool-down = "5m"
///     ramp = "30s"
///     ramp-from = 1
///     max-concurrent = 8
///     max-rate = 100
/// "#)?;
/// assert_eq!(config.breaker, Some(BreakerConfig::default()));
/// let payment = config.breaker_for("payment").unwrap();
/// assert_eq!((payment.threshold_percent, payment.min_calls, payment.max_rate), (25, 10, Some(100)));
/// assert_eq!(config.breaker_for("refund").unwrap().window, Duration::from_secs(60));
/// # Ok::<(), dlq_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Whether the circuit can open (`false` keeps only the limits).
    pub enabled: bool,
    /// The share of transient failures, in percent (1 to 100), that opens the circuit.
    #[serde(rename = "threshold", serialize_with = "ser_percent")]
    pub threshold_percent: u8,
    /// The fewest retries in the window before the share is judged.
    pub min_calls: u32,
    /// How far back the share is measured.
    #[serde(serialize_with = "crate::config::ser_duration")]
    pub window: Duration,
    /// How long the circuit stays open before the first trial.
    #[serde(serialize_with = "crate::config::ser_duration")]
    pub cool_down: Duration,
    /// The longest cool-down (it doubles with each failed trial).
    #[serde(serialize_with = "crate::config::ser_duration")]
    pub max_cool_down: Duration,
    /// How long the rate takes to ramp back up after the circuit closes.
    #[serde(serialize_with = "crate::config::ser_duration")]
    pub ramp: Duration,
    /// The rate (rows/s) the ramp starts from; it doubles ten times over `ramp`.
    pub ramp_from: u32,
    /// The most handlers of the type running at once, over all retriers.
    pub max_concurrent: Option<usize>,
    /// The most rows of the type started per second, over all retriers.
    pub max_rate: Option<u32>,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            threshold_percent: 50,
            min_calls: 20,
            window: Duration::from_secs(60),
            cool_down: Duration::from_secs(5),
            max_cool_down: Duration::from_secs(300),
            ramp: Duration::from_secs(30),
            ramp_from: 1,
            max_concurrent: None,
            max_rate: None,
        }
    }
}

fn ser_percent<S: serde::Serializer>(p: &u8, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{p}%"))
}

impl BreakerConfig {
    /// Parses the short rule `"<percent>% [of <min-calls>] [in <window>]"` over the defaults.
    ///
    /// # Errors
    /// A message saying what does not parse.
    ///
    /// ```
    /// use dlq_core::retry::BreakerConfig;
    /// let b = BreakerConfig::parse_rule("30% of 50 in 2m")?;
    /// assert_eq!((b.threshold_percent, b.min_calls, b.window.as_secs()), (30, 50, 120));
    /// assert!(BreakerConfig::parse_rule("half of them").is_err());
    /// # Ok::<(), String>(())
    /// ```
    pub fn parse_rule(rule: &str) -> Result<Self, String> {
        let mut config = Self::default();
        config.apply_rule(rule)?;
        Ok(config)
    }

    /// Sets what `rule` sets (the grammar is `dlq_breaker_rule`'s, shared with the attribute).
    fn apply_rule(&mut self, rule: &str) -> Result<(), String> {
        let rule = dlq_breaker_rule::parse(rule)?;
        self.threshold_percent = rule.threshold_percent;
        self.min_calls = rule.min_calls.unwrap_or(self.min_calls);
        self.window = rule.window.unwrap_or(self.window);
        Ok(())
    }

    /// Checks values a breaker cannot use.
    pub(crate) fn validate(&self, key: &str) -> Result<(), crate::Error> {
        let invalid = |what: &str, reason: &str| crate::Error::Config {
            key: format!("{key}.{what}"),
            file: None,
            reason: reason.to_owned(),
        };
        if self.window.is_zero() || self.cool_down.is_zero() {
            return Err(invalid("window", "window and cool-down must be above zero"));
        }
        if self.max_cool_down < self.cool_down {
            return Err(invalid("max-cool-down", "must be at least cool-down"));
        }
        if self.max_concurrent == Some(0) || self.max_rate == Some(0) {
            return Err(invalid("max-rate", "limits must be above zero (leave them out for no limit)"));
        }
        Ok(())
    }
}

/// The keys form, every key optional.
#[derive(Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct Keys {
    enabled: Option<bool>,
    threshold: Option<String>,
    min_calls: Option<u32>,
    #[serde(default, deserialize_with = "crate::config::de_opt_duration")]
    window: Option<Duration>,
    #[serde(default, deserialize_with = "crate::config::de_opt_duration")]
    cool_down: Option<Duration>,
    #[serde(default, deserialize_with = "crate::config::de_opt_duration")]
    max_cool_down: Option<Duration>,
    #[serde(default, deserialize_with = "crate::config::de_opt_duration")]
    ramp: Option<Duration>,
    ramp_from: Option<u32>,
    max_concurrent: Option<usize>,
    max_rate: Option<u32>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Raw {
    Rule(String),
    Keys(Box<Keys>),
}

impl<'de> Deserialize<'de> for BreakerConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let keys = match Raw::deserialize(d)? {
            Raw::Rule(rule) => return Self::parse_rule(&rule).map_err(serde::de::Error::custom),
            Raw::Keys(keys) => keys,
        };
        let mut config = Self::default();
        if let Some(threshold) = &keys.threshold {
            config.apply_rule(threshold).map_err(serde::de::Error::custom)?;
        }
        let d = Self::default();
        Ok(Self {
            enabled: keys.enabled.unwrap_or(d.enabled),
            min_calls: keys.min_calls.unwrap_or(config.min_calls),
            window: keys.window.unwrap_or(config.window),
            cool_down: keys.cool_down.unwrap_or(d.cool_down),
            max_cool_down: keys.max_cool_down.unwrap_or(d.max_cool_down),
            ramp: keys.ramp.unwrap_or(d.ramp),
            ramp_from: keys.ramp_from.unwrap_or(d.ramp_from).max(1),
            max_concurrent: keys.max_concurrent,
            max_rate: keys.max_rate,
            threshold_percent: config.threshold_percent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_misuse_is_explained() {
        let b = BreakerConfig::parse_rule("50% of 20 in 1m").unwrap();
        assert_eq!(b, BreakerConfig::default());
        assert_eq!(BreakerConfig::parse_rule("75%").unwrap().threshold_percent, 75);
        assert_eq!(BreakerConfig::parse_rule(" 10 % in 10s").unwrap().window, Duration::from_secs(10));
        for bad in ["", "50", "0%", "101%", "50% of x", "50% in soon", "50% twice"] {
            let err = BreakerConfig::parse_rule(bad).unwrap_err();
            assert!(err.contains("50% of 20 in 1m"), "{bad}: {err}");
        }
    }

    #[test]
    fn serialized_form_reads_back() {
        let config = BreakerConfig { max_rate: Some(7), ..BreakerConfig::parse_rule("30% of 5 in 2s").unwrap() };
        let json = serde_json::to_string(&config).unwrap();
        let back: BreakerConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config, "{json}");
    }

    #[test]
    fn the_documented_configurations_parse() {
        for doc in [include_str!("../../docs/BREAKER.md"), include_str!("../../docs/OUTAGES.md")] {
            let blocks = doc.split("```toml\n").skip(1).filter_map(|b| b.split_once("```").map(|(toml, _)| toml));
            let toml = blocks.into_iter().find(|b| b.contains("breaker")).expect("a toml block with a breaker");
            let config = crate::RetrierConfig::from_toml_str(toml).unwrap();
            config.validate().unwrap();
            let payment = config.breaker_for("payment").unwrap();
            assert_eq!((payment.threshold_percent, payment.min_calls, payment.max_concurrent), (50, 20, Some(8)));
        }
    }

    #[test]
    fn validation_names_the_key() {
        let config = BreakerConfig { max_cool_down: Duration::from_secs(1), ..BreakerConfig::default() };
        let err = config.validate("breakers.payment").unwrap_err().to_string();
        assert!(err.contains("breakers.payment.max-cool-down"), "{err}");
    }
}
