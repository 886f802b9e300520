//! Whether a park answered `Parked` survives a crash of the server, and a failover to its
//! standby: the server's `synchronous_commit` and `synchronous_standby_names`, read once.
//!
//! One query (`current_setting` and a count of `pg_stat_replication`, which any role may run;
//! a role without `pg_read_all_stats` sees the rows of that view, only not their details), on
//! the connection of the store's migrations when it runs them, else before its first park. A
//! park is not durable when
//! - `synchronous_commit = off`: the server answers the commit before its WAL is flushed, so a
//!   crash of the server itself loses the last parks (up to three times `wal_writer_delay`);
//! - or the server has walsenders (a standby, or another WAL consumer) and its commits wait
//!   for none of them (`synchronous_standby_names` empty, or `synchronous_commit = local`):
//!   the standby promoted after a crash may lack the last parks answered `Parked`.
//!
//! `on`, `remote_write` and `remote_apply` with a standby named in `synchronous_standby_names`
//! wait for the standby: a park answered `Parked` is on it (`remote_write`: written to the
//! standby's operating system, lost only if it crashes too). A server without walsenders has
//! no standby to fail over to (or it is disconnected: then no check can tell).

use sqlx::PgConnection;

use super::PgConfig;

/// What a [`PgStore`](super::PgStore) does when its parks would not be durable (see
/// [`PgConfig::durability_check`]).
///
/// ```
/// use dlq_sqlx::postgres::{DurabilityCheck, PgConfig};
///
/// // Fail at start-up (and every park) unless a standby confirms each park.
/// let config = PgConfig::default().durability_check(DurabilityCheck::Refuse);
/// assert_eq!(config.durability_check, DurabilityCheck::Refuse);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DurabilityCheck {
    /// Log one warning (the default).
    #[default]
    Warn,
    /// Refuse: building the store fails (when it runs the migrations), and so does every park,
    /// with [`dlq_core::Error::Config`] (key `durability_check`).
    Refuse,
    /// Do not check (no query).
    Off,
}

impl PgConfig {
    /// Sets what the store does when the server would not keep a park across a crash or a
    /// failover to its standby.
    ///
    /// The store reads the server's `synchronous_commit` and `synchronous_standby_names` once
    /// (as seen by its pool's connections: the server's, the database's, the role's or the
    /// URL's setting). Parks are not durable with `synchronous_commit = off`, or when the
    /// server has walsenders and no standby confirms the commits (`synchronous_standby_names`
    /// empty, or `synchronous_commit = local`): after a failover the new primary may lack rows
    /// whose parks were answered `Parked` (`docs/DESIGN.md`, across a failover). A logical
    /// replication walsender counts as a standby too (a role without `pg_read_all_stats`
    /// cannot tell them apart): [`DurabilityCheck::Off`] when that is all the server has.
    ///
    /// ```
    /// use dlq_sqlx::postgres::{DurabilityCheck, PgConfig};
    ///
    /// // Asynchronous replication, chosen knowingly: no warning.
    /// let config = PgConfig::default().durability_check(DurabilityCheck::Off);
    /// assert_eq!(config.durability_check, DurabilityCheck::Off);
    /// ```
    #[must_use]
    pub const fn durability_check(mut self, check: DurabilityCheck) -> Self {
        self.durability_check = check;
        self
    }
}

/// What the server says about committing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    pub(crate) synchronous_commit: String,
    pub(crate) synchronous_standby_names: String,
    /// Rows of `pg_stat_replication`.
    pub(crate) walsenders: i64,
}

impl Settings {
    /// Reads them on `conn`.
    pub(crate) async fn read(conn: &mut PgConnection) -> Result<Self, sqlx::Error> {
        let (synchronous_commit, synchronous_standby_names, walsenders) = sqlx::query_as(
            "SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'), \
             (SELECT count(*) FROM pg_catalog.pg_stat_replication)",
        )
        .fetch_one(conn)
        .await?;
        Ok(Self { synchronous_commit, synchronous_standby_names, walsenders })
    }

    /// Why a park answered `Parked` could be lost; `None` when it could not.
    pub(crate) fn risk(&self) -> Option<String> {
        let commit = self.synchronous_commit.trim().to_ascii_lowercase();
        if matches!(commit.as_str(), "off" | "false" | "no" | "0") {
            return Some(
                "synchronous_commit is off: the server answers a park before it is on disk, and a crash loses it"
                    .to_owned(),
            );
        }
        if self.walsenders == 0 {
            return None;
        }
        if self.synchronous_standby_names.trim().is_empty() {
            return Some(format!(
                "the server has {} walsender(s) and synchronous_standby_names is empty: no standby confirms a park, \
                 and a failover may lose parks answered Parked",
                self.walsenders
            ));
        }
        (commit == "local").then(|| {
            "synchronous_commit is local: no standby confirms a park, and a failover may lose parks answered Parked"
                .to_owned()
        })
    }
}

/// The check's verdict, kept for the store's life once the settings were read.
pub(crate) struct Durability {
    check: DurabilityCheck,
    /// `Err(reason)` when `Refuse` found a risk.
    verdict: std::sync::OnceLock<Result<(), String>>,
}

impl Durability {
    pub(crate) const fn new(check: DurabilityCheck) -> Self {
        Self { check, verdict: std::sync::OnceLock::new() }
    }

    /// Whether a park must go through the check: the settings are still to be read (so it
    /// needs a connection for it), or they were refused.
    pub(crate) fn pending(&self) -> bool {
        self.check != DurabilityCheck::Off && !matches!(self.verdict.get(), Some(Ok(())))
    }

    /// The refusal, when the settings were read and refused.
    pub(crate) fn refused(&self) -> Option<dlq_core::Error> {
        match self.verdict.get() {
            Some(Err(reason)) => Some(refusal(reason.clone())),
            _ => None,
        }
    }

    /// Checks on `conn` unless done already. A server that refuses the query (not
    /// PostgreSQL's catalog) is logged and taken as checked; a connection error leaves the
    /// check to the next call.
    ///
    /// # Errors
    /// [`dlq_core::Error::Config`] (key `durability_check`) when refused;
    /// [`dlq_core::Error::Store`] when the connection failed.
    pub(crate) async fn check(&self, conn: &mut PgConnection) -> Result<(), dlq_core::Error> {
        if self.check == DurabilityCheck::Off {
            return Ok(());
        }
        let verdict = match self.verdict.get() {
            Some(verdict) => verdict,
            None => match Settings::read(conn).await {
                Ok(settings) => self.verdict.get_or_init(|| self.judge(&settings)),
                Err(error @ sqlx::Error::Database(_)) => {
                    tracing::warn!(%error, "could not read synchronous_commit and synchronous_standby_names: not checked");
                    self.verdict.get_or_init(|| Ok(()))
                }
                Err(error) => return Err(dlq_core::Error::store(error)),
            },
        };
        verdict.clone().map_err(refusal)
    }

    fn judge(&self, settings: &Settings) -> Result<(), String> {
        let Some(risk) = settings.risk() else { return Ok(()) };
        if self.check == DurabilityCheck::Refuse {
            return Err(format!("{risk} (PgConfig::durability_check is Refuse)"));
        }
        tracing::warn!(
            synchronous_commit = %settings.synchronous_commit,
            synchronous_standby_names = %settings.synchronous_standby_names,
            walsenders = settings.walsenders,
            "parks are not durable: {risk}; set synchronous_standby_names and synchronous_commit = on, \
             or PgConfig::durability_check(DurabilityCheck::Off) to accept it"
        );
        Ok(())
    }
}

/// The error of a refused park, or store.
fn refusal(reason: String) -> dlq_core::Error {
    dlq_core::Error::Config { key: "durability_check".into(), file: None, reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(commit: &str, names: &str, walsenders: i64) -> Settings {
        Settings { synchronous_commit: commit.to_owned(), synchronous_standby_names: names.to_owned(), walsenders }
    }

    #[test]
    fn a_park_is_durable_when_a_standby_confirms_it_or_there_is_none() {
        for commit in ["on", "remote_write", "remote_apply"] {
            assert_eq!(settings(commit, "dlq_standby", 1).risk(), None, "{commit} with a synchronous standby");
            assert_eq!(settings(commit, "", 0).risk(), None, "{commit} without walsenders");
        }
        assert_eq!(settings("local", "", 0).risk(), None, "local without walsenders");
    }

    #[test]
    fn a_park_is_not_durable_off_or_when_no_standby_confirms_it() {
        for (commit, names, walsenders) in
            [("off", "", 0), ("off", "s1", 1), ("on", "", 1), ("on", "  ", 2), ("local", "s1", 1)]
        {
            assert!(settings(commit, names, walsenders).risk().is_some(), "{commit}, {names:?}, {walsenders}");
        }
    }
}
