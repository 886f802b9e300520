//! The short rule of a `dlq` circuit breaker, `"50% of 20 in 1m"`.
//!
//! One parser for two readers: `dlq-core` reads the rule in a retrier's configuration
//! (`breaker = "..."`, `threshold = "..."`), and `dlq-macros` checks
//! `#[dead_letter(breaker = "...")]` at compile time. A proc-macro crate cannot use the
//! runtime crate that re-exports it, so the grammar lives here, below both, and the attribute
//! accepts exactly what the configuration does.
//!
//! ```
//! use std::time::Duration;
//!
//! let rule = dlq_breaker_rule::parse("30% of 50 in 2m")?;
//! assert_eq!(rule.threshold_percent, 30);
//! assert_eq!(rule.min_calls, Some(50));
//! assert_eq!(rule.window, Some(Duration::from_secs(120)));
//! assert!(dlq_breaker_rule::parse("half of twenty").is_err());
//! # Ok::<(), String>(())
//! ```

use std::time::Duration;

/// The grammar, as messages show it.
pub const FORM: &str = "<percent>% [of <min-calls>] [in <window>]";

/// A rule that parses, as messages suggest it.
pub const EXAMPLE: &str = "50% of 20 in 1m";

/// A parsed rule: what it sets; what it leaves out keeps the breaker's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rule {
    /// The share of transient failures, in percent (1 to 100), that opens the circuit.
    pub threshold_percent: u8,
    /// The fewest retries in the window before the share is judged (`of <min-calls>`).
    pub min_calls: Option<u32>,
    /// How far back the share is measured (`in <window>`, a `humantime` duration).
    pub window: Option<Duration>,
}

/// Parses `"<percent>% [of <min-calls>] [in <window>]"`.
///
/// # Errors
/// A message that quotes the rule and shows one that parses.
pub fn parse(rule: &str) -> Result<Rule, String> {
    let bad = || format!("expected a rule such as {EXAMPLE:?}, found {rule:?}");
    let (percent, rest) = rule.trim().split_once('%').ok_or_else(bad)?;
    let threshold_percent = percent.trim().parse().ok().filter(|p| (1..=100).contains(p)).ok_or_else(bad)?;
    let (calls, window) = match rest.split_once(" in ") {
        Some((calls, window)) => (calls, Some(window)),
        None => (rest, None),
    };
    let min_calls = if let Some(calls) = calls.trim().strip_prefix("of") {
        Some(calls.trim().parse().map_err(|_| bad())?)
    } else if calls.trim().is_empty() {
        None
    } else {
        return Err(bad());
    };
    let window = window.map(|w| humantime::parse_duration(w.trim()).map_err(|_| bad())).transpose()?;
    Ok(Rule { threshold_percent, min_calls, window })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_left_out_stay_unset() {
        let rule = parse(" 10 % in 10s").unwrap();
        assert_eq!((rule.threshold_percent, rule.min_calls, rule.window), (10, None, Some(Duration::from_secs(10))));
        assert_eq!(parse("75%").unwrap(), Rule { threshold_percent: 75, min_calls: None, window: None });
    }

    #[test]
    fn misuse_is_explained() {
        for bad in ["", "50", "0%", "101%", "50% of x", "50% in soon", "50% twice", "half of twenty"] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err, format!("expected a rule such as \"50% of 20 in 1m\", found {bad:?}"));
        }
    }
}

/// The crate's README, its page on crates.io: its examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
