//! The configured schema: validation, and the statements rendered for it once.
//!
//! Statements live in `sql/*.sql` with a `{schema}` placeholder. The only text ever put into
//! SQL is the schema name, validated by [`validate_schema`] and double-quoted, and the claim's
//! batch size, an integer rendered by Rust (so that PostgreSQL caches one plan per batch size
//! instead of planning every claim); every other value is a bound parameter.

use std::sync::Arc;

use sqlx::AssertSqlSafe;

/// The longest identifier PostgreSQL keeps (`NAMEDATALEN - 1`).
const MAX_IDENTIFIER_BYTES: usize = 63;

/// Checks that `name` is a plain SQL identifier usable as the dead-letter schema: ASCII
/// letters, digits and `_`, not starting with a digit, at most 63 bytes, and not a reserved
/// `pg_` name. Anything else (quotes, semicolons, spaces, `..`) is rejected rather than escaped.
///
/// # Errors
/// [`dlq_core::Error::Config`] with key `schema`, saying what is wrong.
///
/// ```
/// let err = dlq_sqlx::postgres::validate_schema("a; DROP TABLE x").unwrap_err();
/// assert!(matches!(&err, dlq_core::Error::Config { key, .. } if key == "schema"));
/// assert!(err.to_string().contains("invalid schema name"), "{err}");
///
/// assert!(dlq_sqlx::postgres::validate_schema("dlq").is_ok());
/// assert!(dlq_sqlx::postgres::validate_schema("payments_dlq2").is_ok());
/// for hostile in ["", "dlq\"; DROP SCHEMA public CASCADE; --", "a b", "pg_catalog", "1abc", "x.y"] {
///     assert!(dlq_sqlx::postgres::validate_schema(hostile).is_err(), "{hostile}");
/// }
/// ```
pub fn validate_schema(name: &str) -> Result<(), dlq_core::Error> {
    validate_identifier("schema", "schema name", name, MAX_IDENTIFIER_BYTES)
}

/// Checks that `name` (what the configuration `key` calls a `what`) is a plain identifier of
/// at most `max_bytes`, as [`validate_schema`] says.
pub(crate) fn validate_identifier(key: &str, what: &str, name: &str, max_bytes: usize) -> Result<(), dlq_core::Error> {
    let invalid = |reason: &str| {
        let reason = format!("invalid {what} {name:?}: {reason}");
        Err(dlq_core::Error::Config { key: key.into(), file: None, reason })
    };
    let Some(first) = name.chars().next() else {
        return invalid("it is empty");
    };
    if name.len() > max_bytes {
        return invalid(&format!("it is longer than {max_bytes} bytes"));
    }
    if !(first.is_ascii_alphabetic() || first == '_') {
        return invalid("it must start with an ASCII letter or `_`");
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return invalid("only ASCII letters, digits and `_` are allowed");
    }
    if name.to_ascii_lowercase().starts_with("pg_") {
        return invalid("names starting with `pg_` are reserved by PostgreSQL");
    }
    Ok(())
}

/// `schema` (which must have passed [`validate_schema`]) as an SQL identifier: double-quoted.
pub(crate) fn quoted(schema: &str) -> String {
    format!("\"{schema}\"")
}

/// How many (statement, batch size) pairs keep a rendered claim statement.
const CLAIM_SIZES_KEPT: usize = 48;

/// The statements that claim, each rendered per batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum ClaimStmt {
    /// The claim on its own (`claim.sql`).
    Alone,
    /// A batch of successes written and the next batch claimed (`settle_claim.sql` with
    /// `succeed_rows.sql`).
    AfterSuccesses,
    /// Any batch of outcomes written and the next batch claimed (`settle_claim.sql` with
    /// `settle_rows.sql`).
    AfterOutcomes,
}

impl Sql {
    /// The claim statement with `limit` as its batch size (at most `i64::MAX`).
    pub(crate) fn claim_with_limit(&self, limit: usize) -> AssertSqlSafe<Arc<str>> {
        self.claiming(ClaimStmt::Alone, limit)
    }

    /// One of the claiming statements with `limit` as its batch size (at most `i64::MAX`).
    pub(crate) fn claiming(&self, stmt: ClaimStmt, limit: usize) -> AssertSqlSafe<Arc<str>> {
        let limit = limit.min(usize::try_from(i64::MAX).unwrap_or(usize::MAX));
        let template = match stmt {
            ClaimStmt::Alone => &self.claim,
            ClaimStmt::AfterSuccesses => &self.succeed_claim,
            ClaimStmt::AfterOutcomes => &self.settle_claim,
        };
        let mut claims = self.claims.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(rendered) = claims.get(&(stmt, limit)) {
            return rendered.sql();
        }
        let rendered = Stmt(template.0.replace("{limit}", &limit.to_string()).into());
        if claims.len() < CLAIM_SIZES_KEPT {
            claims.insert((stmt, limit), rendered.clone());
        }
        rendered.sql()
    }
}

/// A rendered statement: cheap to clone into `sqlx::query`.
#[derive(Debug, Clone)]
pub(crate) struct Stmt(Arc<str>);

impl Stmt {
    /// The statement for `sqlx::query`; the text is one of ours with a validated schema name.
    pub(crate) fn sql(&self) -> AssertSqlSafe<Arc<str>> {
        AssertSqlSafe(Arc::clone(&self.0))
    }
}

macro_rules! statements {
    ($($(#[$m:meta])* $name:ident = $file:literal;)*) => {
        /// Every statement of the store, rendered for one schema.
        #[derive(Debug)]
        pub(crate) struct Sql {
            /// `NOTIFY` channel for wake-ups, derived from the schema.
            pub(crate) channel: String,
            /// The quoted schema, for a statement written at run time (the bulk park's `COPY`).
            pub(crate) quoted_schema: String,
            /// The park batch's row type (migration 0016) in this schema.
            pub(crate) park_row: super::park_rows::RowType,
            /// The claiming statements rendered per batch size.
            claims: std::sync::Mutex<std::collections::HashMap<(ClaimStmt, usize), Stmt>>,
            /// Successes written and the next batch claimed, `{limit}` not yet filled in.
            pub(crate) succeed_claim: Stmt,
            /// Outcomes written and the next batch claimed, `{limit}` not yet filled in.
            pub(crate) settle_claim: Stmt,
            $($(#[$m])* pub(crate) $name: Stmt,)*
        }

        impl Sql {
            /// Renders every statement for `schema`, which must have passed [`validate_schema`];
            /// outcomes commit durably when `durable_outcomes` (`PgConfig::durable_outcomes`).
            pub(crate) fn new(schema: &str, durable_outcomes: bool) -> Self {
                let quoted = quoted(schema);
                let render = |template: &str| render(template, &quoted, durable_outcomes);
                Self {
                    channel: channel_name(schema),
                    $($name: Stmt(render(include_str!(concat!("sql/", $file))).into()),)*
                    succeed_claim: Stmt(render(&settle_claim("{succeed_rows}", 3, "0")).into()),
                    settle_claim: Stmt(render(&settle_claim("{settle_rows}", 16, "(SELECT count(*) FROM wake)")).into()),
                    park_row: super::park_rows::RowType::new(&quoted),
                    quoted_schema: quoted,
                    claims: std::sync::Mutex::default(),
                }
            }
        }
    };
}

statements! {
    /// Multi-row park with dedupe, attempt 0 and a wake-up, in one statement.
    park = "park.sql";
    /// A `COPY` park's clock and ids.
    park_ids = "park_ids.sql";
    /// Dedupe keys to ids, for rows parked concurrently by others.
    dedupe_lookup = "dedupe_lookup.sql";
    /// Claim due and expired rows with `SKIP LOCKED`.
    claim = "claim.sql";
    /// A capped claim's counts: rows in flight, rows claimed within the window.
    cap_counts = "cap_counts.sql";
    /// Record a capped claim's rows.
    cap_record = "cap_record.sql";
    /// Every outcome of a batch, fenced, with attempt history, in one statement.
    settle = "settle.sql";
    /// Successes only (the common case), fenced, with attempt history.
    succeed = "succeed.sql";
    /// One row.
    get = "get.sql";
    /// Filtered rows, newest first.
    list = "list.sql";
    /// Filtered rows, oldest first.
    list_oldest = "list_oldest.sql";
    /// Filtered rows, counted up to a limit.
    count_matching = "count_matching.sql";
    /// Rows created in a time window, counted up to a limit, from the window's first id.
    count_created = "count_created.sql";
    /// The smallest id a row created at a time or later can have.
    first_id_since = "first_id_since.sql";
    /// One audit entry by id.
    audit_entry = "audit_entry.sql";
    /// Audit a reveal of one row.
    reveal = "reveal.sql";
    /// Mark claimed rows a retrier could not open.
    mark_unreadable = "mark_unreadable.sql";
    /// Count the rows whose latest claim could not open them.
    count_unreadable = "count_unreadable.sql";
    /// Lock the rows of an action batch.
    action_lock = "action_lock.sql";
    /// Redrive locked, checked rows.
    redrive_ids = "redrive_ids.sql";
    /// Discard locked, checked rows.
    discard_ids = "discard_ids.sql";
    /// Store a bulk operation.
    op_insert = "op_insert.sql";
    /// Read a bulk operation.
    op_get = "op_get.sql";
    /// Move an operation's cursor with its batch.
    op_advance = "op_advance.sql";
    /// Set an operation's state.
    op_state = "op_state.sql";
    /// The events table's vacuum state.
    table_health = "table_health.sql";
    /// Vacuum the events table.
    vacuum = "vacuum.sql";
    /// Vacuum the tallies.
    vacuum_tallies = "vacuum_tallies.sql";
    /// Counts by type and status.
    stats = "stats.sql";
    /// Failure groups, by any filter (an aggregate over the matching rows).
    groups = "groups.sql";
    /// Failure groups by status, event type and fingerprint, from the tallies.
    groups_tallied = "groups_tallied.sql";
    /// Fold the tallies' appended rows into one per key.
    fold_tallies = "fold_tallies.sql";
    /// Rows created per event type and time bucket.
    created_histogram = "created_histogram.sql";
    /// Rows parked per event type and whole-hour bucket, from the hourly tallies.
    parked_histogram = "parked_histogram.sql";
    /// Attempt history of a row.
    attempts = "attempts.sql";
    /// Audit log of a row.
    audit = "audit.sql";
    /// Lock a row for a payload patch.
    patch_lock = "patch_lock.sql";
    /// Write a patched payload and its audit entry.
    patch_write = "patch_write.sql";
    /// Lock a row for a rewrite of its payload in a newer version.
    upgrade_lock = "upgrade_lock.sql";
    /// Write a payload in a newer version and its audit entry.
    upgrade_write = "upgrade_write.sql";
    /// Lock the rows of a patch operation's batch, with their payloads.
    patch_rows_lock = "patch_rows_lock.sql";
    /// The rows of a patch batch an operation has patched already.
    patch_rows_marked = "patch_rows_marked.sql";
    /// Write the checked rows of a patch batch with their audit entries.
    patch_rows_write = "patch_rows_write.sql";
    /// Delete a slice of finished rows past retention.
    purge = "purge.sql";
    /// Delete one subject's rows with their history, and record the erasure.
    erase = "erase.sql";
    /// The newest erasure records.
    erasures = "erasures.sql";
    /// Keep the subject key's check value unless one is kept.
    subject_key_check = "subject_key_check.sql";
    /// The subject key's check value.
    subject_key_read = "subject_key_read.sql";
    /// Count one subject's rows.
    count_subject = "count_subject.sql";
    /// Write records of the type catalog; the newest version wins.
    publish_types = "publish_types.sql";
    /// The type catalog.
    event_types = "event_types.sql";
    /// Keep the published versions' schemas.
    publish_schemas = "publish_schemas.sql";
    /// The versions' schemas.
    version_schemas = "version_schemas.sql";
    /// Drop a version's schemas of other shapes.
    accept_schema_drop = "accept_schema_drop.sql";
    /// Count the finished rows past retention (what a purge would delete).
    purgeable = "purgeable.sql";
    /// Count every row (for `max_entries`).
    count = "count.sql";
    /// Delete the oldest finished or dead rows to make room.
    drop_oldest = "drop_oldest.sql";
    /// Insert or refresh a retrier's heartbeat row.
    heartbeat = "heartbeat.sql";
    /// Remove a retrier's heartbeat row.
    heartbeat_remove = "heartbeat_remove.sql";
    /// The heartbeat rows.
    retriers = "retriers.sql";
    /// Every circuit, with the database clock.
    circuits = "circuits.sql";
    /// The first write of a circuit, logged.
    circuit_insert = "circuit_insert.sql";
    /// A compare-and-set write of a circuit, logged.
    circuit_update = "circuit_update.sql";
    /// The circuit log, newest first.
    circuit_log = "circuit_log.sql";
}

/// The `WHERE` clause of a `ListFilter` (see `admin::bind_filter`), shared by the statements
/// that select by filter.
const FILTER: &str = include_str!("sql/filter.sql");
/// The claim's CTEs, with its parameters as `{p1}` to `{p4}`.
const CLAIM_ROWS: &str = include_str!("sql/claim_rows.sql");
/// The CTEs that write a mixed batch of outcomes.
const SETTLE_ROWS: &str = include_str!("sql/settle_rows.sql");
/// The CTE that writes a batch of successes.
const SUCCEED_ROWS: &str = include_str!("sql/succeed_rows.sql");
/// Outcomes written and the next batch claimed, with `{outcome_rows}`, `{claim_rows}` and
/// `{woken}` to fill in.
const SETTLE_CLAIM: &str = include_str!("sql/settle_claim.sql");

/// `claim_rows.sql` with its four parameters numbered from `$first`.
fn claim_rows(first: usize) -> String {
    (1..=4).fold(CLAIM_ROWS.trim_end().to_owned(), |sql, p| {
        sql.replace(&format!("{{p{p}}}"), &format!("${}", first + p - 1))
    })
}

/// `settle_claim.sql` around `outcome_rows`, the claim's parameters numbered from `$first`.
fn settle_claim(outcome_rows: &str, first: usize, woken: &str) -> String {
    SETTLE_CLAIM
        .replace("{outcome_rows}", outcome_rows)
        .replace("{claim_rows}", &claim_rows(first))
        .replace("{woken}", woken)
}

/// A statement's text for a quoted schema: the shared parts (`{filter}`, `{claim_rows}`,
/// `{settle_rows}`, `{succeed_rows}`), `{schema}` and `{outcome_commit}` (the outcomes'
/// `synchronous_commit`: `off`, or the server's own when `durable_outcomes`) filled in, all
/// our own text (no value is ever put into SQL).
fn render(template: &str, quoted_schema: &str, durable_outcomes: bool) -> String {
    let outcome_commit = if durable_outcomes { "current_setting('synchronous_commit')" } else { "'off'" };
    template
        .replace("{filter}", FILTER.trim_end())
        .replace("{claim_rows}", &claim_rows(1))
        .replace("{settle_rows}", SETTLE_ROWS.trim_end())
        .replace("{succeed_rows}", SUCCEED_ROWS.trim_end())
        .replace("{schema}", quoted_schema)
        .replace("{outcome_commit}", outcome_commit)
}

/// `dlq_events` for the `public` schema, `dlq_events.<schema>` otherwise (at most 63 bytes:
/// longer names are cut, which at worst wakes another schema's retriers needlessly).
fn channel_name(schema: &str) -> String {
    let mut channel = if schema == "public" { "dlq_events".to_owned() } else { format!("dlq_events.{schema}") };
    channel.truncate(MAX_IDENTIFIER_BYTES);
    channel
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_the_quoted_schema_only() {
        let sql = Sql::new("tenant_a", false);
        assert!(sql.claim.0.contains("\"tenant_a\".dlq_events"));
        assert!(!sql.claim.0.contains("{schema}"));
        let claim = sql.claim_with_limit(50);
        assert!(claim.0.contains("LIMIT 50") && !claim.0.contains("{limit}"));
        assert!(sql.claim_with_limit(usize::MAX).0.contains(&format!("LIMIT {}", i64::MAX)));
        assert_eq!(sql.channel, "dlq_events.tenant_a");
        assert_eq!(Sql::new("public", false).channel, "dlq_events");
        assert!(sql.list.0.contains("id > $10)") && !sql.list.0.contains("{filter}"));
    }

    #[test]
    fn outcomes_commit_as_configured() {
        let commits = |sql: &Sql| {
            let claim = |stmt| sql.claiming(stmt, 50).0.to_string();
            let texts = [
                sql.settle.0.to_string(),
                sql.succeed.0.to_string(),
                claim(ClaimStmt::AfterSuccesses),
                claim(ClaimStmt::AfterOutcomes),
            ];
            texts.map(|t| {
                assert!(!t.contains("{outcome_commit}") && !t.contains("{schema}"), "a placeholder is left: {t}");
                let off = t.contains("set_config('synchronous_commit', 'off', true)");
                let server =
                    t.contains("set_config('synchronous_commit', current_setting('synchronous_commit'), true)");
                assert!(off != server, "{t}");
                off
            })
        };
        assert_eq!(commits(&Sql::new("public", false)), [true; 4], "asynchronous by default");
        assert_eq!(commits(&Sql::new("public", true)), [false; 4], "as the server says when durable");
        // A claim on its own is asynchronous either way.
        assert!(Sql::new("public", true).claim.0.contains("set_config('synchronous_commit', 'off', true)"));
    }

    #[test]
    fn hostile_names_are_rejected() {
        for name in ["x\"y", "x;y", "x'y", "x y", "x-y", "é", "x\0", "PG_toast", &"a".repeat(64)] {
            let err = validate_schema(name).unwrap_err();
            assert!(matches!(&err, dlq_core::Error::Config { key, .. } if key == "schema"), "{name}: {err}");
        }
        assert!(validate_schema(&"a".repeat(63)).is_ok());
    }
}
