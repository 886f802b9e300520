//! The command line as clap derive types.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use dlq_core::{DlqId, ListFilter, Status};

/// The exit codes, at the end of `dlq --help`.
const EXIT_CODES: &str = "\
Exit codes:
  0    success (a purge with nothing old enough to delete too)
  1    error (one line on stderr)
  2    usage: a bad flag, number, duration, rate or URL, an id below 1, an empty --reason;
       purge without --yes off a terminal; patch with no --patch, no EDITOR and no terminal
  3    a canary stopped the redrive (the rest stay parked; --resume continues)
  4    nothing matched: no row selected, an id no row has (named; nothing done to the
       others), or an unknown event type (no row, circuit, retrier, handler or catalog
       record has it); nothing done
  130  interrupted (Ctrl-C): stopped after the batch in flight; --resume continues
  141  the output was closed (dlq ls | head): stopped quietly; --resume continues
A --dry-run exits with the code its real run would.

Text read from the store is shown with control characters replaced by '.', cut to 60
characters (…) in tables; `dlq show` has a row's fields whole, --json has everything exactly
(control characters and bidi overrides as \\u escapes).";

/// `dlq roles`.
#[derive(Debug, Args)]
pub struct RolesArgs {
    /// The roles are `PREFIX_migrator`, `PREFIX_service`, `PREFIX_operator_read` and
    /// `PREFIX_operator` (lowercase letters, digits and `_`).
    #[arg(long, default_value = "dlq")]
    pub prefix: String,
    /// Runs the SQL on --database-url (as a role with CREATEROLE that owns the schema's
    /// objects) instead of printing it; all or nothing.
    #[arg(long)]
    pub apply: bool,
}

/// The most rows a batch, a canary, a page or a top list may hold.
pub(crate) const MAX_ROWS: u64 = 10_000;

/// `dlq`: see, group, repair and replay dead letters on PostgreSQL or SQLite.
#[derive(Debug, Parser)]
#[command(name = "dlq", version, about, long_about = None, after_help = EXIT_CODES)]
pub struct Cli {
    /// `postgres://…` or `sqlite://FILE`.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    pub database_url: Option<String>,
    /// The PostgreSQL schema holding the dlq tables.
    #[arg(long, env = "DLQ_SCHEMA", global = true, default_value = "public")]
    pub schema: String,
    /// Behind a connection pooler in transaction mode (PgBouncer): a URL to the same database
    /// with a session of its own, for what needs one (`migrate`, `roles --apply`, the console's
    /// wake-ups).
    #[arg(long, env = "DLQ_SESSION_URL", global = true, hide_env_values = true)]
    pub session_url: Option<String>,
    /// Who is acting, for the audit log (default: the OS user).
    #[arg(long, global = true)]
    pub actor: Option<String>,
    /// Print one JSON document instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// The verb.
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Counts by status and type, top failure groups, growth, retriers, orphans, warnings.
    Stats {
        /// How many failure groups to show (1 to 1000).
        #[arg(long, default_value_t = 10, value_parser = top_groups)]
        top: usize,
    },
    /// Lists rows, newest first (keyset pagination with `--after`).
    Ls(LsArgs),
    /// Shows one row: payload, error chain, stack trace, source, attempts, audit log (the
    /// fields its type redacts masked, unless `--reveal`).
    Show {
        /// The row's id.
        #[arg(value_parser = row_id, allow_negative_numbers = true)]
        id: DlqId,
        /// Shows the row whole: its redacted fields, and its encrypted payload and error
        /// opened with DLQ_KEYS (or DLQ_KEYS_FILE); audited (action `reveal`) first.
        #[arg(long, requires = "reason")]
        reveal: bool,
        /// Why it is revealed (kept in the audit log); needs `--reveal`.
        #[arg(long, requires = "reveal")]
        reason: Option<String>,
    },
    /// Moves FAILED_PERMANENTLY rows back to PENDING, in batches, resumable.
    Redrive(RedriveArgs),
    /// Moves rows to DISCARDED (a reason is required), in batches, resumable.
    Discard(DiscardArgs),
    /// Repairs a payload with an RFC 6902 JSON Patch, or in `$EDITOR`.
    Patch(PatchArgs),
    /// Restores the payload a patch replaced.
    Undo {
        /// The patch's audit entry id (from `dlq show`).
        #[arg(value_parser = row_id, allow_negative_numbers = true)]
        audit_id: i64,
        /// Why (default: "undo of audit entry N").
        #[arg(long)]
        reason: Option<String>,
        /// Undo it even though later patches of the row would be reverted with it (refused
        /// without, listing them).
        #[arg(long)]
        force: bool,
    },
    /// Rewrites an event type's PENDING and FAILED_PERMANENTLY rows parked in an older version
    /// of its contract in its handler's version, through the handler's upcasters, each
    /// audited. Only in the service's own binary (`dlq_cli::Embedded`), which links them.
    Upgrade {
        /// The event type, e.g. `payment`.
        event_type: String,
        /// Why (kept in the audit log).
        #[arg(long)]
        reason: String,
        /// Upcast and report without writing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Deletes SUCCEEDED and DISCARDED rows older than the given age, for good: shows how
    /// many and asks on a terminal; elsewhere needs `--yes`.
    Purge {
        /// Age, e.g. `7d`, `12h` (at most 100 years).
        #[arg(long, value_parser = parse_age)]
        older_than: Duration,
        /// Delete without asking (what a script or a cron job passes).
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Deletes every row of one data subject (a customer, a card holder), whatever its
    /// status, with its attempts and audit log, for good, and records the erasure without
    /// the subject (GDPR). Needs DLQ_SUBJECT_KEY, the key the service parks with.
    Erase {
        /// The subject as the service names it (`SourceMeta::subject`, or the value at the
        /// handler's `subject = "/pointer"`), e.g. `customer-42`.
        #[arg(long)]
        subject: String,
        /// Why: the request's reference, kept in the erasure record.
        #[arg(long)]
        reason: String,
    },
    /// Lists the newest erasure records: who erased how much, when and why.
    Erasures {
        /// How many (1 to 10000).
        #[arg(long, default_value_t = 20, value_parser = rows)]
        limit: usize,
    },
    /// Creates or updates the dlq tables. On PostgreSQL this release's contract migrations (those
    /// that drop what the previous release's processes may still use) wait for `--contract`.
    Migrate {
        /// Also apply this release's contract migrations: run it once every process runs this
        /// release (refused while a retrier of an older release still heartbeats). SQLite has
        /// no contract migrations.
        #[arg(long)]
        contract: bool,
    },
    /// Prints the SQL that creates the deployment's four roles for --schema (migrator,
    /// service, operator-read, operator) with the grants each needs; `--apply` runs it.
    /// Re-run it after each `dlq migrate`.
    Roles(RolesArgs),
    /// Lists the live retriers and the event types they handle.
    Workers,
    /// Stops every retrier from claiming an event type (honoured within one poll interval);
    /// its rows keep their state and retry counts. Audited in the circuit log.
    Pause {
        /// The event type, e.g. `payment`.
        event_type: String,
        /// Why (kept in the circuit log and shown by `dlq stats`).
        #[arg(long)]
        reason: String,
    },
    /// Lets retriers claim a paused event type again.
    Resume {
        /// The event type.
        event_type: String,
        /// Why (default: "resumed by an operator").
        #[arg(long)]
        reason: Option<String>,
    },
    /// Re-seals the payloads of encrypted rows under the active key (needs DLQ_KEYS or
    /// DLQ_KEYS_FILE), each audited; run it again to finish an interrupted run.
    Rekey {
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
        /// Why (kept in the audit log).
        #[arg(long)]
        reason: String,
    },
    /// Serves the web console (and /metrics, /healthz); loopback only unless a token is set.
    Serve(crate::serve::ServeArgs),
}

/// Filters shared by `ls`, `redrive` and `discard`.
#[derive(Debug, Clone, Default, Args)]
pub struct FilterArgs {
    /// Only this status (PENDING, PROCESSING, SUCCEEDED, FAILED_PERMANENTLY, DISCARDED).
    #[arg(long, value_parser = parse_status)]
    pub status: Option<Status>,
    /// Only this event type.
    #[arg(long)]
    pub event_type: Option<String>,
    /// Only this failure group (fingerprint, from `dlq stats`).
    #[arg(long, visible_alias = "fingerprint")]
    pub group: Option<String>,
    /// Only this error kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only rows whose error reason contains this text.
    #[arg(long)]
    pub reason_contains: Option<String>,
    /// Only rows parked since: a duration ago (`2h`, `30m`) or an RFC 3339 time.
    #[arg(long, value_parser = parse_when)]
    pub since: Option<DateTime<Utc>>,
    /// Only rows parked before: a duration ago or an RFC 3339 time.
    #[arg(long, value_parser = parse_when)]
    pub until: Option<DateTime<Utc>>,
}

impl FilterArgs {
    /// The store filter.
    pub fn filter(&self) -> ListFilter {
        ListFilter {
            status: self.status,
            event_type: self.event_type.clone(),
            fingerprint: self.group.clone(),
            kind: self.kind.clone(),
            reason: self.reason_contains.clone(),
            since: self.since,
            until: self.until,
            ..ListFilter::default()
        }
    }

    fn is_empty(&self) -> bool {
        self.filter() == ListFilter::default()
    }
}

/// `dlq ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// The filters.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Only rows whose error reason contains this text (as `--reason-contains`).
    #[arg(long, conflicts_with = "reason_contains")]
    pub reason: Option<String>,
    /// At most this many rows (1 to 10000).
    #[arg(long, default_value_t = 50, value_parser = rows)]
    pub limit: usize,
    /// The next page: rows past this id (the last id of the previous page).
    #[arg(long)]
    pub after: Option<DlqId>,
    /// Oldest first.
    #[arg(long)]
    pub oldest_first: bool,
    /// Only rows that would not decode, with why: by the real decode in a binary that embeds
    /// the CLI with its handlers, else by the store's type catalog (a version the handler
    /// cannot take, a payload its version's JSON Schema refuses, a type no process published).
    /// Checks at most 10000 rows per call (`--after` goes on).
    #[arg(long)]
    pub undecodable: bool,
}

/// Which rows a bulk verb applies to, and how it runs.
#[derive(Debug, Args)]
pub struct BulkArgs {
    /// Row ids (or use filters, or `--all`): an id no row has refuses the whole list, naming
    /// it (exit 4), so nothing is done.
    #[arg(value_parser = row_id, allow_negative_numbers = true)]
    pub ids: Vec<DlqId>,
    /// The filters.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Every row the verb can apply to (needed when no id or filter is given).
    #[arg(long)]
    pub all: bool,
    /// Print what would happen; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Rows per transaction (1 to 10000; default 100, or the resumed operation's).
    #[arg(long, value_parser = rows)]
    pub batch: Option<usize>,
    /// At most this many rows in any one second (`200/s` or `200`, from 0.01 to 1000000),
    /// the canary's included: batches shrink to fit. Stored with the operation: a resume
    /// goes at the same rate unless given another. A dry run is never paced.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Stop after moving this many rows (at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub max: Option<u64>,
    /// Continue a stopped or interrupted operation with its stored selection and options
    /// (`--rate`, `--batch` and, for a redrive, `--canary` override them for this run).
    #[arg(long, conflicts_with_all = ["ids", "all", "dry_run", "max", "status", "event_type", "group", "kind",
                                      "reason_contains", "since", "until"])]
    pub resume: Option<i64>,
}

impl BulkArgs {
    /// The selection, or `None` when nothing selects rows (a usage error unless resuming).
    pub fn selection(&self) -> Option<ListFilter> {
        if self.ids.is_empty() && self.filter.is_empty() && !self.all {
            return None;
        }
        Some(ListFilter { ids: self.ids.clone(), ..self.filter.filter() })
    }
}

/// `dlq redrive`.
#[derive(Debug, Args)]
pub struct RedriveArgs {
    /// The selection and pacing.
    #[command(flatten)]
    pub bulk: BulkArgs,
    /// Why, for the audit log.
    #[arg(long, conflicts_with = "resume")]
    pub reason: Option<String>,
    /// Redrive this many rows first (1 to 10000) and go on only while they (and each batch)
    /// succeed.
    #[arg(long, value_parser = rows)]
    pub canary: Option<usize>,
    /// How long a canary waits for its rows' outcome (1s to 24h).
    #[arg(long, value_parser = parse_canary_wait, default_value = "60s")]
    pub canary_wait: Duration,
    /// Refuse rows already redriven this many times (the loop guard, 0 to 1000).
    #[arg(long, default_value_t = dlq_core::admin::DEFAULT_MAX_REDRIVES, conflicts_with = "resume",
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub max_redrives: u32,
    /// Redrive rows past the loop guard too.
    #[arg(long, conflicts_with = "resume")]
    pub force: bool,
    /// First count, per group, the rows that decode as they are, after upcasting, unchecked and
    /// not at all, and refuse before any row moves when one would not decode. The stock binary
    /// checks versions and JSON Schemas by the store's type catalog (published by the
    /// retriers); a binary that embeds the CLI with its handlers decodes each payload.
    #[arg(long, conflicts_with = "resume")]
    pub validate: bool,
}

/// `dlq discard`.
#[derive(Debug, Args)]
pub struct DiscardArgs {
    /// The selection and pacing.
    #[command(flatten)]
    pub bulk: BulkArgs,
    /// Why (required unless resuming), for the audit log.
    #[arg(long, required_unless_present = "resume", conflicts_with = "resume")]
    pub reason: Option<String>,
}

/// `dlq patch`: one row, or with `--group` every `FAILED_PERMANENTLY` row of a failure group.
#[derive(Debug, Args)]
pub struct PatchArgs {
    /// The row's id (or `--group`, or `--resume`).
    #[arg(required_unless_present_any = ["group", "resume"], value_parser = row_id, allow_negative_numbers = true)]
    pub id: Option<DlqId>,
    /// Every FAILED_PERMANENTLY row of this failure group (fingerprint, from `dlq stats`), as a
    /// stored operation run batch by batch like `dlq redrive` (paced, Ctrl-C-able, resumable),
    /// each row audited; rows the patch does not fit are refused with the reason.
    #[arg(long, visible_alias = "fingerprint", conflicts_with = "id", requires = "patch")]
    pub group: Option<String>,
    /// An RFC 6902 JSON Patch file, or `-` for standard input (default: edit the payload in
    /// `$VISUAL`, `$EDITOR`, or vi on a terminal; a private file, removed after).
    #[arg(long)]
    pub patch: Option<PathBuf>,
    /// Print what would change, and how many patched rows would decode (by the handlers, or
    /// the store's type catalog when it holds the type); write nothing.
    #[arg(long, requires = "patch")]
    pub dry_run: bool,
    /// With `--group`, rows per transaction (1 to 10000; default 100, or the resumed
    /// operation's).
    #[arg(long, value_parser = rows)]
    pub batch: Option<usize>,
    /// With `--group`, at most this many rows in any one second (`200/s` or `200`); stored
    /// with the operation, as `dlq redrive --rate`.
    #[arg(long, value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Continue a stopped or interrupted group patch (`operation N` in its output, or the
    /// console's operations page) with its stored patch, selection and reason (`--rate` and
    /// `--batch` override them for this run).
    #[arg(long, conflicts_with_all = ["id", "group", "patch", "dry_run", "reason"])]
    pub resume: Option<i64>,
    /// Why, for the audit log.
    #[arg(long, required_unless_present = "resume")]
    pub reason: Option<String>,
    /// Refuse a patch whose result does not deserialize into the handler's event type (in a
    /// binary that embeds the CLI with its handlers).
    #[arg(long)]
    pub validate: bool,
    /// With `--group`, only the group's rows parked in this payload version (`dlq ls` shows
    /// it; rows of other versions are left alone).
    #[arg(long, requires = "group", value_parser = clap::value_parser!(u32).range(1..))]
    pub where_version: Option<u32>,
}

/// A row's (or an audit entry's) id: a whole number from 1. The stores number rows from 1 and
/// every selection walks ids above 0, so 0 or less would select nothing, silently.
fn row_id(text: &str) -> Result<DlqId, String> {
    match text.trim().parse::<DlqId>() {
        Ok(id) if id >= 1 => Ok(id),
        Ok(id) => Err(format!("{id} is not an id: ids are whole numbers from 1")),
        Err(e) => Err(format!("`{text}` is not an id: {e}")),
    }
}

/// Parses a status name, case-insensitively.
fn parse_status(text: &str) -> Result<Status, String> {
    text.to_ascii_uppercase().parse::<Status>().map_err(|e| e.to_string())
}

/// `2h`, `30m`, `7d` (humantime).
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("`{text}` is not a duration like 30s, 15m, 2h or 7d: {e}"))
}

/// A count of rows: a batch, a canary, a page, from 1 to [`MAX_ROWS`].
fn rows(text: &str) -> Result<usize, String> {
    count_in(text, 1, MAX_ROWS)
}

/// How many failure groups `stats` shows: 1 to 1000.
fn top_groups(text: &str) -> Result<usize, String> {
    count_in(text, 1, 1_000)
}

fn count_in(text: &str, min: u64, max: u64) -> Result<usize, String> {
    let n: u64 = text.trim().parse().map_err(|_| format!("`{text}` is not a whole number"))?;
    if !(min..=max).contains(&n) {
        return Err(format!("{n} is out of range: from {min} to {max}"));
    }
    usize::try_from(n).map_err(|_| format!("{n} is too large here"))
}

/// A duration within `min..=max`, named `what` in the error.
fn duration_in(text: &str, min: Duration, max: Duration, what: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < min || d > max {
        let (min, max) = (humantime::format_duration(min), humantime::format_duration(max));
        return Err(format!("{what} must be from {min} to {max}"));
    }
    Ok(d)
}

/// A canary's wait: 1s to 24h.
fn parse_canary_wait(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::from_secs(1), dlq_core::admin::Pacing::MAX_CANARY_WAIT, "a canary's wait")
}

/// A purge's age: 0s to 100 years.
fn parse_age(text: &str) -> Result<Duration, String> {
    duration_in(text, Duration::ZERO, Duration::from_secs(36_500 * 86_400), "the age")
}

/// A duration ago, or an RFC 3339 timestamp.
pub(crate) fn parse_when(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let ago = humantime::parse_duration(text)
        .map_err(|_| format!("`{text}` is neither a duration (2h, 30m) nor an RFC 3339 time (2026-05-01T10:00:00Z)"))?;
    let ago = chrono::Duration::from_std(ago).map_err(|e| format!("`{text}` is too long: {e}"))?;
    Utc::now().checked_sub_signed(ago).ok_or_else(|| format!("`{text}` is too long ago"))
}

/// `200/s` or `200`: rows per second, above zero.
fn parse_rate(text: &str) -> Result<f64, String> {
    dlq_core::admin::BulkPlan::parse_rate(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_timestamps_and_rates_parse_or_say_why() {
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("2 parsecs").unwrap_err().contains("not a duration"));
        let at = parse_when("2026-05-01T10:00:00Z").unwrap();
        assert_eq!(at.to_rfc3339(), "2026-05-01T10:00:00+00:00");
        let hour_ago = parse_when("1h").unwrap();
        assert!(Utc::now() - hour_ago >= chrono::TimeDelta::hours(1));
        assert!(parse_when("yesterday").unwrap_err().contains("RFC 3339"));
        assert_eq!(parse_rate("200/s"), Ok(200.0));
        assert!(parse_rate("0/s").is_err() && parse_rate("fast").is_err());
        assert_eq!(parse_status("failed_permanently"), Ok(Status::FailedPermanently));
    }

    #[test]
    fn every_number_is_bounded_with_a_one_line_reason() {
        assert_eq!(rows("100"), Ok(100));
        assert_eq!(rows("0").unwrap_err(), "0 is out of range: from 1 to 10000");
        assert_eq!(rows("10001").unwrap_err(), "10001 is out of range: from 1 to 10000");
        assert!(rows("-1").unwrap_err().contains("not a whole number"));
        assert!(rows("99999999999999999999999").unwrap_err().contains("not a whole number"));
        assert!(top_groups("0").is_err() && top_groups("1000").is_ok());
        assert!(parse_rate("1e-300").unwrap_err().contains("between 0.01/s and 1000000/s"));
        assert!(parse_rate("1e-10").is_err() && parse_rate("1e300").is_err() && parse_rate("NaN").is_err());
        assert_eq!(parse_canary_wait("0s").unwrap_err(), "a canary's wait must be from 1s to 1day");
        assert!(parse_canary_wait("500000000y").is_err() && parse_canary_wait("2h").is_ok());
        assert!(parse_age("0s").is_ok() && parse_age("200y").unwrap_err().contains("the age must be"));
        assert_eq!(row_id("7"), Ok(7));
        assert_eq!(row_id("0").unwrap_err(), "0 is not an id: ids are whole numbers from 1");
        assert!(row_id("-3").unwrap_err().contains("-3 is not an id") && row_id("x").is_err());
    }
}
