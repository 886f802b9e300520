//! Backoff schedules and retry policies: pure functions of the attempt number.

use std::time::Duration;

/// How long to wait before retry number `n` (1-based).
///
/// Defaults are those of [`Backoff::EXP`]: start at 1 s, double, cap at 1 h, ±15 % jitter.
/// One second keeps a blip (a restarted pod, a dropped connection) under a second of delay;
/// doubling reaches the cap after 12 retries, so a downstream that is out for hours is probed
/// about once an hour rather than hammered; jitter spreads a burst of failures that happened
/// together so their retries do not arrive together.
///
/// ```
/// use dlq_core::retry::Backoff;
/// use std::time::Duration;
///
/// let b = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(3600));
/// assert_eq!(b.delay(1), Duration::from_secs(1));
/// assert_eq!(b.delay(4), Duration::from_secs(8));
/// assert_eq!(b.delay(20), Duration::from_secs(3600));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The shape of the schedule.
    pub kind: BackoffKind,
    /// The first delay (and the step, for `linear`).
    pub base: Duration,
    /// The largest delay.
    pub max: Duration,
    /// The fraction of random spread, from 0.0 to 1.0: 0.15 means ±15 %.
    pub jitter: f64,
}

/// The shape of a [`Backoff`] schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackoffKind {
    /// `base * 2^(n-1)`, capped at `max`.
    Exponential,
    /// `base` every time.
    Fixed,
    /// `base * n`, capped at `max`.
    Linear,
    /// No wait: due again at once.
    None,
}

// The names `#[dead_letter(backoff = "...")]` takes.
text_forms!(BackoffKind { Exponential => "exp", Fixed => "fixed", Linear => "linear", None => "none" });

impl Backoff {
    /// Exponential from 1 s, capped at 1 h, with ±15 % jitter.
    pub const EXP: Self = Self {
        kind: BackoffKind::Exponential,
        base: Duration::from_secs(1),
        max: Duration::from_secs(3600),
        jitter: 0.15,
    };

    /// No delay at all: due again at once.
    pub const NONE: Self = Self { kind: BackoffKind::None, base: Duration::ZERO, max: Duration::ZERO, jitter: 0.0 };

    /// Exponential backoff from `base`, doubling, capped at `max`, without jitter.
    pub const fn exponential(base: Duration, max: Duration) -> Self {
        Self { kind: BackoffKind::Exponential, base, max, jitter: 0.0 }
    }

    /// The same delay every time, without jitter.
    ///
    /// ```
    /// # use dlq_core::retry::Backoff; use std::time::Duration;
    /// assert_eq!(Backoff::fixed(Duration::from_secs(5)).delay(9), Duration::from_secs(5));
    /// ```
    pub const fn fixed(delay: Duration) -> Self {
        Self { kind: BackoffKind::Fixed, base: delay, max: delay, jitter: 0.0 }
    }

    /// `step * n`, capped at `max`, without jitter.
    ///
    /// ```
    /// # use dlq_core::retry::Backoff; use std::time::Duration;
    /// let b = Backoff::linear(Duration::from_secs(10), Duration::from_secs(25));
    /// assert_eq!(b.delay(2), Duration::from_secs(20));
    /// assert_eq!(b.delay(3), Duration::from_secs(25));
    /// ```
    pub const fn linear(step: Duration, max: Duration) -> Self {
        Self { kind: BackoffKind::Linear, base: step, max, jitter: 0.0 }
    }

    /// The same schedule with `jitter` (clamped to 0.0..=1.0) of random spread.
    #[must_use]
    pub const fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter.clamp(0.0, 1.0);
        self
    }

    /// The delay before retry `n` (1-based) with no jitter applied.
    pub fn delay(&self, n: u32) -> Duration {
        let n = n.max(1);
        match self.kind {
            BackoffKind::None => Duration::ZERO,
            BackoffKind::Fixed => self.base,
            BackoffKind::Linear => self.base.saturating_mul(n).min(self.max),
            BackoffKind::Exponential => {
                let factor = 1u32.checked_shl(n - 1).unwrap_or(u32::MAX);
                self.base.saturating_mul(factor).min(self.max)
            }
        }
    }

    /// The delay before retry `n`, spread by the jitter: `unit` is a random number in
    /// `[0, 1)` (0.5 means no spread). Never exceeds `max` by more than the jitter.
    ///
    /// ```
    /// # use dlq_core::retry::Backoff; use std::time::Duration;
    /// let b = Backoff::EXP;
    /// assert_eq!(b.jittered(3, 0.5), Duration::from_secs(4));
    /// assert_eq!(b.jittered(3, 0.0), Duration::from_millis(3400));
    /// ```
    pub fn jittered(&self, n: u32, unit: f64) -> Duration {
        let base = self.delay(n);
        if self.jitter <= 0.0 || base.is_zero() {
            return base;
        }
        let spread = (unit.clamp(0.0, 1.0) * 2.0 - 1.0) * self.jitter;
        base.mul_f64((1.0 + spread).max(0.0))
    }

    /// The delay before retry `n`, with jitter drawn from a thread-local generator.
    pub fn next_delay(&self, n: u32) -> Duration {
        self.jittered(n, fastrand::f64())
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self::EXP
    }
}

/// When to give up on an event: after `max_retries` failed retries, or once it has been
/// failing for longer than `max_age`.
///
/// ```
/// use dlq_core::{retry::Backoff, retry::RetryPolicy};
/// use std::time::Duration;
///
/// let policy = RetryPolicy::new(240, Backoff::fixed(Duration::from_secs(6 * 3600)));
/// assert_eq!(policy.max_retries, 240);
/// assert!(policy.max_age.is_none());
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// How many retries after the first failure before the event is parked dead
    /// (`retries_exhausted`). Zero parks every failure dead at once.
    pub max_retries: u32,
    /// The wait between retries.
    pub backoff: Backoff,
    /// The retry horizon, counted from the first failure (`max_age`).
    pub max_age: Option<Duration>,
    /// The longest one attempt may run before it counts as a transient failure.
    pub timeout: Option<Duration>,
}

impl RetryPolicy {
    /// 25 retries with [`Backoff::EXP`]: about 17 hours of trying before an event is parked dead.
    pub const DEFAULT: Self = Self { max_retries: 25, backoff: Backoff::EXP, max_age: None, timeout: None };

    /// A policy with `max_retries` and `backoff`, no horizon and no per-attempt timeout.
    pub const fn new(max_retries: u32, backoff: Backoff) -> Self {
        Self { max_retries, backoff, max_age: None, timeout: None }
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Wall-clock time that advances with tokio's clock, so a paused test clock moves it too.
pub(crate) fn now() -> chrono::DateTime<chrono::Utc> {
    static BASE: std::sync::OnceLock<(chrono::DateTime<chrono::Utc>, std::time::Instant)> = std::sync::OnceLock::new();
    let (wall, origin) = *BASE.get_or_init(|| (chrono::Utc::now(), std::time::Instant::now()));
    // A paused clock stands where it was paused, which may be before the origin (its runtime
    // started before this process first read the time): it counts back from the origin, or it
    // would stand still until it passed the origin while tokio's clock moved on.
    let tokio_now = tokio::time::Instant::now().into_std();
    let delta = |d| chrono::Duration::from_std(d).unwrap_or(chrono::TimeDelta::MAX);
    wall + delta(tokio_now.saturating_duration_since(origin)) - delta(origin.saturating_duration_since(tokio_now))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn exponential_schedule_is_exact() {
        let b = Backoff::EXP;
        let got: Vec<_> = (1..=14).map(|n| b.delay(n)).collect();
        let want: Vec<_> = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3600, 3600].into_iter().map(S).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn exponential_never_overflows() {
        assert_eq!(Backoff::EXP.delay(u32::MAX), S(3600));
        assert_eq!(Backoff::exponential(Duration::MAX, Duration::MAX).delay(64), Duration::MAX);
    }

    #[test]
    fn linear_fixed_none_schedules() {
        let lin = Backoff::linear(S(30), S(100));
        assert_eq!((1..=5).map(|n| lin.delay(n)).collect::<Vec<_>>(), [S(30), S(60), S(90), S(100), S(100)]);
        assert_eq!(Backoff::fixed(S(7)).delay(1), S(7));
        assert_eq!(Backoff::NONE.delay(50), Duration::ZERO);
        assert_eq!(Backoff::NONE.next_delay(50), Duration::ZERO);
    }

    #[test]
    fn jitter_stays_within_its_band() {
        let b = Backoff::EXP;
        assert_eq!(b.jittered(5, 0.0), S(16).mul_f64(0.85));
        assert_eq!(b.jittered(5, 1.0), S(16).mul_f64(1.15));
        let mut rng = fastrand::Rng::with_seed(7);
        for n in 1..30 {
            let d = b.jittered(n, rng.f64());
            let center = b.delay(n);
            assert!(d >= center.mul_f64(0.85) && d <= center.mul_f64(1.15), "{n}: {d:?}");
        }
    }

    #[test]
    fn seeded_jitter_is_reproducible() {
        let b = Backoff::EXP;
        let run = |seed| {
            let mut rng = fastrand::Rng::with_seed(seed);
            (1..6).map(|n| b.jittered(n, rng.f64())).collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
    }

    #[test]
    fn with_jitter_clamps() {
        assert_eq!(Backoff::EXP.with_jitter(3.0).jitter, 1.0);
        assert_eq!(Backoff::EXP.with_jitter(-1.0).jitter, 0.0);
    }
}
