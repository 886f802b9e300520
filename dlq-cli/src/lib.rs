//! `dlq`, the on-call command line: see, group, repair and replay dead letters safely, on
//! PostgreSQL (`postgres://…`, with `--schema`) or an SQLite file (`sqlite://FILE`).
//!
//! Every verb is a thin shell over [`dlq_core::admin`], the same calls the web console
//! makes, so both audit the same way (actor and reason on every action).
//!
//! ```text
//! dlq stats                                   # what failed, grouped, and is anyone retrying it?
//! dlq ls --group 9f2c41d07a3b5e18 --since 2h  # the rows of one failure group
//! dlq show 1204                               # payload, error chain, attempts, audit log
//! dlq show 1204 --reveal --reason "chargeback 118"  # redacted fields too, audited
//! dlq patch 1204 --patch fix.json --reason "trailing space from POS firmware"
//! dlq patch --group 9f2c41d07a3b5e18 --patch fix.json --reason "…" --dry-run  # then without
//! dlq redrive --group 9f2c41d07a3b5e18 --canary 5 --rate 50/s --reason "ledger fixed"
//! dlq pause payment --reason "ledger migration"  # no retrier claims payments until resumed
//! dlq resume payment
//! dlq erase --subject customer-42 --reason "GDPR request 118"  # needs DLQ_SUBJECT_KEY
//! dlq serve --allow-actions                   # the web console on http://127.0.0.1:8080/
//! ```
//!
//! # Exit codes
//! | code | meaning |
//! | --- | --- |
//! | 0 | done (a purge with nothing old enough to delete too) |
//! | 1 | error: unknown id, store unreachable or not migrated, patch that does not apply, permission denied, a resume whose verb is not the operation's, a declined purge, … (one line on stderr) |
//! | 2 | usage: unknown flag, malformed or out-of-range filter, number, duration, rate or URL, an id below 1, an empty `--reason`; `purge` without `--yes` and no terminal to ask on; `patch ID` without `--patch`, with neither `EDITOR` nor `VISUAL` set and no terminal (one line on stderr, bar clap's usage text for a flag or verb it does not know) |
//! | 3 | a canary stopped the redrive: its rows failed again (or had no outcome in time); the rest stay parked, `--resume` continues |
//! | 4 | nothing matched: `redrive`, `discard` or `patch --group` selected no row; a list of ids holds one no row has (each such id named, nothing done to the others); `pause`/`resume` or an `--event-type` filter (`ls`, `redrive`, `discard`, `rekey`) named an event type nothing knows (no row, circuit, live retrier, catalog record or handler has it), `upgrade` one the embedding binary has no handler for; nothing was done or stored ("nothing matched: …" on stderr) |
//! | 130 | interrupted (Ctrl-C): a bulk verb stopped after its batch in flight; `--resume` continues |
//! | 141 | the output was closed (`dlq ls \| head`): the verb stopped quietly, as a tool killed by SIGPIPE; a bulk verb stopped at a batch boundary, `--resume` continues |
//!
//! A `--dry-run` exits with the code its real run would (a patch that does not fit its one
//! row: 1), and prints nothing that says a row moved.
//!
//! Text read from the store (event types, reasons, payloads, headers, …) is shown with
//! control characters and bidi overrides replaced by `.`, so no stored row can move the
//! cursor, retitle the window or write the clipboard. A table cell holds at most 60
//! characters of it (cut between characters, after that replacement, ending in `…`), so a
//! 10,000-character reason cannot scroll the rest away; `dlq show` prints the row's own
//! fields whole, and `--json` prints everything exactly, escaped.
//!
//! No message prints a database URL's password: a URL quoted in an error (clap's too) shows
//! `user:***@` and `password=***` ([`dlq_sqlx::mask_passwords`]).
//!
//! # JSON output
//! `--json` prints one JSON document on stdout per verb (errors still go to stderr):
//! - `stats`: `{at, counts: [{event_type, pending, processing, succeeded, failed_permanently,
//!   discarded}], groups: [{fingerprint, event_type, kind, sample_reason, sample_id, count,
//!   first_seen, last_seen}], growth: {last_5m, last_1h, since_5m, since_1h}, retriers: [{owner, host, pid,
//!   event_types, singleton, started_at, last_seen}], orphans: [{event_type, pending,
//!   expected_handler}], saturation, capacity: {entries, max_entries, blocks_when_full},
//!   table: {live_tuples, dead_tuples, autovacuum, last_vacuum}, circuits: [circuit],
//!   sealed_unreadable, warnings: [text]}` (`capacity` is null without `max_entries`, `table`
//!   null on SQLite, `sealed_unreadable` (encrypted rows left claimed by a retrier without
//!   their key) null on a store that does not count them;
//!   `circuits` lists the open, half-open and paused types);
//! - `ls`: `{rows: [row], next}` where `next` is the `--after` of the next page or null; a
//!   row is `{id, event_type, version, handler, status, dead_reason, error_class, error_kind,
//!   error_reason, fingerprint, retry_count, max_retries, redrive_count, retry_after,
//!   created_at, updated_at}` (`version`: the version of the event's contract the payload is
//!   written in);
//! - `show`: a row plus `{payload, payload_raw_hex, payload_note, payload_truncated, payload_original_len,
//!   payload_sha256, error_chain, stacktrace, source, lease_owner, dedupe_key, attempts:
//!   [{attempt, outcome, error_class, error_reason, owner, at}], audit: [{id, action, actor,
//!   reason, diff, at}]}`;
//! - `redrive`, `discard`, `patch --group`, `patch --resume`: `{operation, action, dry_run,
//!   moved, refused, moved_ids, refusals: [{id, reason, …}], state, canary_stop, cursor}` (a
//!   patch's rows refused because it does not fit them: `{id, reason: "unfit", message}`);
//! - `patch`, `undo`: `{id, audit_id, old, new}`; `patch --dry-run`: `{patched: [{id,
//!   changes: [{path, old, new}]}], refused: [{id, reason}]}` (`old`/`new` null where the value
//!   is absent);
//!   `purge`: `{purged}`; `erase`: `{erased: erasure}` and `erasures`: `{erasures:
//!   [erasure]}`, an erasure being `{id, subject_prefix, rows, attempts, audit, actor, reason,
//!   at}`; `migrate`:
//!   `{migrated, schema, contracted: [migration], contract_waiting: [migration]}` (a migration
//!   being `"0038 contract …"`: its number and description); `workers`: `{retriers: [...]}`;
//! - `upgrade`: `{event_type, to, dry_run, upgraded: [{id, from}], refused: [{id, reason}]}`;
//! - `pause`, `resume`: the circuit, `{event_type, state, open_until, cool_down, trial_owner,
//!   trial_until, paused, paused_by, pause_reason, reason, version, updated_at}` (`state` is
//!   `closed`, `open` or `half_open`; `cool_down` in seconds; see `docs/BREAKER.md`).
//!
//! # Embedding
//! A service ships the CLI inside its own binary (`myservice dlq stats`) with [`Embedded`]:
//! its handlers are registered there, so `dlq stats` names the expected handler of each
//! orphaned type, and `redrive --validate` decodes each selected payload into its handler's
//! event type and refuses the whole redrive, before any row moves, when one would not decode
//! (`patch --validate`: a patch that would produce such a payload).
//!
//! ```no_run
//! use clap::Parser;
//!
//! # async fn demo() -> std::process::ExitCode {
//! let cli = dlq_cli::Cli::parse_from(["myservice-dlq", "stats"]);
//! let embedded = dlq_cli::Embedded::default().registry(dlq_core::handlers::registry().unwrap().clone());
//! embedded.run(cli).await
//! # }
//! ```

mod args;
mod bulk;
mod connect;
mod render;
mod repair;
mod serve;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use dlq_core::admin::{Admin, Validator};
use dlq_core::{Error, handlers::Registry};

pub use args::{BulkArgs, Cli, Command, DiscardArgs, FilterArgs, LsArgs, PatchArgs, RedriveArgs, RolesArgs};
pub use serve::ServeArgs;

/// Runs the CLI on `args` (the program name first) and returns its exit code: what the
/// `dlq` binary's `main` does.
///
/// ```no_run
/// # async fn demo() {
/// let code = dlq_cli::run(["dlq", "ls", "--status", "FAILED_PERMANENTLY"]).await;
/// # }
/// ```
pub async fn run<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    Embedded::default().run_from(args).await
}

/// The CLI inside a service's own binary: its registry (which enables `--validate` on
/// `redrive` and `patch`: each payload must deserialize into its handler's event type) and,
/// optionally, a validator of its own.
#[derive(Clone, Default)]
pub struct Embedded {
    registry: Option<Registry>,
    validator: Option<Validator>,
}

impl std::fmt::Debug for Embedded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedded").field("registry", &self.registry).finish_non_exhaustive()
    }
}

impl Embedded {
    /// The service's handlers: orphaned types are shown with their expected handler, and
    /// `--validate` decodes payloads into their handler's event type (a redrive with a row
    /// that would not decode is refused before any row moves).
    #[must_use]
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// A check of the service's own, run by `--validate` after the registry's decode check;
    /// `Err(message)` refuses the row (or the patch).
    #[must_use]
    pub fn validator(mut self, validator: Validator) -> Self {
        self.validator = Some(validator);
        self
    }

    /// Parses `args` (the program name first) and runs them, as [`run`] does: a service's
    /// `main` can be this one call.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<std::process::ExitCode, dlq_core::Error> {
    /// # #[dlq_core::dead_letter(event_type = "doc-embedded")]
    /// # async fn handle_payment(amount_cents: u64) -> Result<(), std::io::Error> { Ok(()) }
    /// let embedded = dlq_cli::Embedded::default().registry(dlq_core::handlers![handle_payment]?);
    /// Ok(embedded.run_from(std::env::args_os()).await)
    /// # }
    /// ```
    pub async fn run_from<I, T>(&self, args: I) -> ExitCode
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        match Cli::try_parse_from(args) {
            Ok(cli) => self.run(cli).await,
            Err(err) => {
                use clap::error::ErrorKind;
                // clap quotes what it refused, which may be a database URL (never its
                // password) or a terminal escape (never raw).
                let text = err.render().to_string();
                match err.kind() {
                    ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => drop(err.print()),
                    // A bad value (a number out of range, a malformed duration): one line, as
                    // every other error of the CLI.
                    ErrorKind::InvalidValue | ErrorKind::ValueValidation | ErrorKind::InvalidUtf8 => {
                        let line = text.lines().next().unwrap_or_default();
                        say(&format!("dlq: {}", line.strip_prefix("error: ").unwrap_or(line)));
                    }
                    // clap's usage text, as clap prints it unless what it quotes needs
                    // neutralizing (`dlq $'\e[2J'`) or masking.
                    _ => {
                        let shown = render::neutralize(&dlq_sqlx::mask_passwords(&text), true).into_owned();
                        if shown == text {
                            drop(err.print());
                        } else {
                            drop(write!(std::io::stderr().lock(), "{shown}"));
                        }
                    }
                }
                ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2))
            }
        }
    }

    /// Runs a parsed command line; prints its output and returns the exit code.
    pub async fn run(&self, cli: Cli) -> ExitCode {
        let out = render::Out::new(cli.json);
        let code = match self.execute(&cli, &out).await {
            Ok(code) => code,
            Err(failure) => {
                say(&format!("dlq: {}", failure.message));
                ExitCode::from(failure.code)
            }
        };
        match out.failed() {
            None => code,
            Some(std::io::ErrorKind::BrokenPipe) => ExitCode::from(exit::CLOSED),
            Some(_) => {
                say(&format!("dlq: cannot write the output: {}", out.failure_text()));
                ExitCode::from(exit::ERROR)
            }
        }
    }

    async fn execute(&self, cli: &Cli, out: &render::Out) -> Result<ExitCode, Failure> {
        if let Command::Roles(args) = &cli.command
            && !args.apply
        {
            // Printing the SQL needs no database.
            let roles = roles_for(args)?;
            let sql = dlq_sqlx::postgres::roles_sql(&cli.schema, &roles)
                .map_err(|e| Failure::usage(dlq_core::admin::one_line(&e)))?;
            out.roles(&cli.schema, &roles, &sql, false);
            return Ok(ExitCode::SUCCESS);
        }
        let url = cli.database_url.as_deref().ok_or_else(|| {
            Failure::usage("no database: pass --database-url or set DATABASE_URL (postgres://… or sqlite://FILE)")
        })?;
        if let Command::Serve(args) = &cli.command {
            serve::check(args)?;
        }
        usage(&cli.command)?;
        let migrate = match cli.command {
            Command::Migrate { contract: false } => connect::Migrate::Expand,
            Command::Migrate { contract: true } => connect::Migrate::Contract,
            _ => connect::Migrate::No,
        };
        connect::target(url)?;
        if let Command::Roles(args) = &cli.command {
            let roles = roles_for(args)?;
            connect::apply_roles(url, &cli.schema, cli.session_url.as_deref(), &roles).await?;
            let sql = dlq_sqlx::postgres::roles_sql(&cli.schema, &roles).map_err(|e| Failure::error(e.to_string()))?;
            out.roles(&cli.schema, &roles, &sql, true);
            return Ok(ExitCode::SUCCESS);
        }
        let purpose = if matches!(cli.command, Command::Serve(_)) { connect::Use::Console } else { connect::Use::Verb };
        let (store, migrated) = connect::open(url, &cli.schema, cli.session_url.as_deref(), migrate, purpose).await?;
        if migrate != connect::Migrate::No {
            out.migrated(&cli.schema, &migrated);
            return Ok(ExitCode::SUCCESS);
        }
        // Every verb masks what the handlers redact: the embedding service's registry says it,
        // and the store's type catalog (what the retriers published) says it to every binary.
        let mut admin = Admin::new(store, actor(cli.actor.as_deref()));
        if let Some(registry) = &self.registry {
            admin = admin.with_registry(registry.clone());
        }
        if let Some(validator) = &self.validator {
            admin = admin.with_validator(validator.clone());
        }
        if matches!(&cli.command, Command::Patch(args) if args.validate) {
            admin = admin.with_patch_validation();
        }
        if let Some(keys) = keys()? {
            admin = admin.keys(keys);
        }
        // Without the handlers, payloads are judged by the store's type catalog; a patch's dry
        // run also says how the patched rows would decode when the catalog can tell.
        let validates = validates(&cli.command);
        if validates || matches!(&cli.command, Command::Patch(args) if args.dry_run) {
            admin = admin.with_store_catalog().await?;
        }
        if validates && !admin.can_judge() {
            return Err(Failure::usage(EMPTY_CATALOG));
        }
        self.verb(cli, &admin, out).await
    }

    async fn verb(&self, cli: &Cli, admin: &Admin, out: &render::Out) -> Result<ExitCode, Failure> {
        if let Some(event_type) = event_type_filter(&cli.command) {
            Self::known_type(admin, event_type).await?;
        }
        match &cli.command {
            Command::Stats { top } => out.stats(&admin.stats(*top).await?),
            Command::Ls(args) => {
                let mut filter = args.filter.filter();
                filter.reason = args.reason.clone().or(filter.reason);
                filter.limit = args.limit;
                filter.after = args.after;
                if args.oldest_first {
                    filter = filter.oldest_first();
                }
                if args.undecodable {
                    out.undecodable(&admin.undecodable(filter, UNDECODABLE_SCAN).await?);
                } else {
                    out.list(&admin.list(filter).await?);
                }
            }
            Command::Show { id, reveal: false, .. } => out.show(&admin.show(*id).await?),
            Command::Show { id, reveal: true, reason } => {
                out.show(&admin.reveal(*id, reason.as_deref().unwrap_or_default()).await?);
            }
            Command::Redrive(args) => {
                Self::can_validate(args.validate, admin)?;
                return bulk::redrive(admin, args, out).await;
            }
            Command::Discard(args) => return bulk::discard(admin, args, out).await,
            Command::Patch(args) => {
                Self::can_validate(args.validate, admin)?;
                match repair::patch(admin, args).await? {
                    repair::Repaired::One(outcome) => out.patched(&outcome),
                    // One row's dry run (`Admin::patch_dry_run`) fails as its real run would.
                    repair::Repaired::Many(report) if report.patched.is_empty() && report.refused.is_empty() => {
                        let group = args.group.as_deref().unwrap_or_default();
                        return Err(Failure::nothing(format!("no FAILED_PERMANENTLY row in group `{group}`")));
                    }
                    repair::Repaired::Many(report) => out.patched_many(&report),
                    repair::Repaired::Stored(plan) => return bulk::patch(admin, plan, args, out).await,
                }
            }
            Command::Undo { audit_id, reason, force } => {
                out.patched(&admin.undo(*audit_id, reason.as_deref(), *force).await?)
            }
            Command::Upgrade { event_type, reason, dry_run } => {
                if self.registry.is_none() {
                    return Err(Failure::usage(
                        "upgrade needs the service's handlers and their upcasters: run the CLI embedded in the service's binary (dlq_cli::Embedded)",
                    ));
                }
                out.upgraded(event_type, &admin.upgrade(event_type, reason, *dry_run).await?);
            }
            Command::Purge { older_than, yes } => {
                let doomed = admin.purgeable(*older_than).await?;
                if doomed > 0 && !yes {
                    confirm_purge(doomed, *older_than)?;
                }
                out.purged(admin.purge(*older_than).await?);
            }
            Command::Erase { subject, reason } => {
                let doomed = admin.erasable(subject).await?;
                out.note(&format!("{doomed} rows are stored under this subject: erasing them"));
                out.erased(&admin.erase(subject, reason).await?);
            }
            Command::Erasures { limit } => out.erasures(&admin.erasures(*limit).await?),
            // Answered by `execute`: migrate once the store is open and migrated, roles before.
            Command::Migrate { .. } | Command::Roles(_) => {}
            Command::Workers => out.workers(&admin.workers().await?),
            Command::Rekey { filter, reason } => out.rekeyed(&admin.rekey(filter.filter(), reason).await?),
            Command::Pause { event_type, reason } => {
                Self::known_type(admin, event_type).await?;
                out.circuit(&admin.pause_type(event_type, reason).await?);
            }
            Command::Resume { event_type, reason } => {
                Self::known_type(admin, event_type).await?;
                out.circuit(&admin.resume_type(event_type, reason.as_deref()).await?);
            }
            Command::Serve(args) => serve::run(admin.clone(), args).await?,
        }
        Ok(ExitCode::SUCCESS)
    }

    /// A type to pause or resume, or an `--event-type` filter, must be known (rows, a
    /// circuit, a retrier, a catalog record or a handler): a misspelt type would be paused to
    /// no effect, or listed as if it had no rows.
    async fn known_type(admin: &Admin, event_type: &str) -> Result<(), Failure> {
        if event_type.trim().is_empty() || admin.knows_type(event_type).await? {
            return Ok(());
        }
        Err(Failure::nothing(format!(
            "unknown event type `{event_type}`: no row, circuit, live retrier, catalog record or handler has it (`dlq stats` lists the types)"
        )))
    }

    /// `--validate` needs the handlers (or a validator): a usage error in the plain binary.
    fn can_validate(validate: bool, admin: &Admin) -> Result<(), Failure> {
        if validate && !admin.can_validate() {
            return Err(Failure::usage("--validate needs the service's handlers or the store's type catalog"));
        }
        Ok(())
    }
}

/// The `--event-type` a verb filters by, when it names one.
fn event_type_filter(command: &Command) -> Option<&str> {
    let filter = match command {
        Command::Ls(args) => &args.filter,
        Command::Redrive(args) => &args.bulk.filter,
        Command::Discard(args) => &args.bulk.filter,
        Command::Rekey { filter, .. } => filter,
        _ => return None,
    };
    filter.event_type.as_deref()
}

/// Rows `dlq ls --undecodable` checks per call at most.
const UNDECODABLE_SCAN: u64 = 10_000;

/// Whether the command checks payloads: without the handlers (the stock binary) it checks them
/// by the store's type catalog.
fn validates(command: &Command) -> bool {
    match command {
        Command::Redrive(args) => args.validate,
        Command::Patch(args) => args.validate,
        Command::Ls(args) => args.undecodable,
        _ => false,
    }
}

/// Why `--validate` (or `ls --undecodable`) cannot run without the handlers: the store's type
/// catalog is empty, and how it gets filled.
const EMPTY_CATALOG: &str = "--validate (and ls --undecodable) check payloads by the store's type catalog, which is empty: a retrier publishes its event types when it starts (or run the CLI embedded in the service's binary, dlq_cli::Embedded)";

/// What clap cannot check: a reason given must say something (an empty one is refused as a
/// usage error, before anything is read or written), an event type must be named.
fn usage(command: &Command) -> Result<(), Failure> {
    let blank = |text: &str| text.trim().is_empty();
    let (verb, reason, required) = match command {
        Command::Discard(args) => ("discard", args.reason.as_deref(), args.bulk.resume.is_none()),
        Command::Redrive(args) => ("redrive", args.reason.as_deref(), false),
        Command::Patch(args) => ("patch", args.reason.as_deref(), args.resume.is_none()),
        Command::Undo { reason, .. } => ("undo", reason.as_deref(), false),
        Command::Rekey { reason, .. } => ("rekey", Some(reason.as_str()), true),
        Command::Show { reveal: true, reason, .. } => ("reveal", reason.as_deref(), true),
        Command::Erase { subject, reason } => {
            if blank(subject) {
                return Err(Failure::usage("erase needs a non-empty --subject"));
            }
            ("erase", Some(reason.as_str()), true)
        }
        Command::Upgrade { event_type, .. } if blank(event_type) => {
            return Err(Failure::usage("name the event type (`dlq stats` lists them)"));
        }
        Command::Upgrade { reason, .. } => ("upgrade", Some(reason.as_str()), true),
        Command::Pause { event_type, reason } | Command::Resume { event_type, reason: Some(reason) } => {
            if blank(event_type) {
                return Err(Failure::usage("name the event type (`dlq stats` lists them)"));
            }
            let verb = if matches!(command, Command::Pause { .. }) { "pause" } else { "resume" };
            (verb, Some(reason.as_str()), true)
        }
        Command::Resume { event_type, reason: None } if blank(event_type) => {
            return Err(Failure::usage("name the event type (`dlq stats` lists them)"));
        }
        _ => return Ok(()),
    };
    match reason {
        Some(reason) if blank(reason) => {
            Err(Failure::usage(format!("{verb} needs a non-empty --reason: it is kept in the audit log")))
        }
        None if required => Err(Failure::usage(format!("{verb} needs --reason: it is kept in the audit log"))),
        _ => Ok(()),
    }
}

/// `--actor`, or the OS user.
fn actor(given: Option<&str>) -> String {
    if let Some(actor) = given.map(str::trim).filter(|a| !a.is_empty()) {
        return actor.to_owned();
    }
    ["USER", "USERNAME", "LOGNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The exit codes (see the crate documentation).
pub(crate) mod exit {
    /// An error.
    pub(crate) const ERROR: u8 = 1;
    /// A usage error.
    pub(crate) const USAGE: u8 = 2;
    /// A canary stopped the redrive.
    pub(crate) const CANARY_STOPPED: u8 = 3;
    /// The selection matched nothing: nothing done.
    pub(crate) const NOTHING_MATCHED: u8 = 4;
    /// Ctrl-C stopped a bulk verb after its batch.
    pub(crate) const INTERRUPTED: u8 = 130;
    /// The output was closed (128 + SIGPIPE, what a shell reports for a tool killed by it).
    pub(crate) const CLOSED: u8 = 141;
}

/// One line on stderr, neutralized, passwords masked; a closed stderr is ignored (there is
/// nowhere left to say it).
/// The roles `dlq roles` names, from its `--prefix`.
fn roles_for(args: &args::RolesArgs) -> Result<dlq_sqlx::postgres::Roles, Failure> {
    dlq_sqlx::postgres::Roles::with_prefix(&args.prefix).map_err(|e| Failure::usage(dlq_core::admin::one_line(&e)))
}

fn say(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", render::stderr_line(text));
}

/// `purge` deletes for good: on a terminal it shows the count and asks; elsewhere it needs
/// `--yes`.
fn confirm_purge(doomed: u64, older_than: Duration) -> Result<(), Failure> {
    let what = format!(
        "purge deletes {doomed} SUCCEEDED/DISCARDED rows last changed over {} ago, with their attempts and audit log, for good",
        humantime::format_duration(older_than)
    );
    if !(std::io::stdin().is_terminal() && std::io::stderr().is_terminal()) {
        return Err(Failure::usage(format!("{what}: pass --yes to confirm (no terminal to ask on)")));
    }
    let confirmed =
        ask(&format!("{what}.\nType yes to delete them: "), &mut std::io::stdin().lock(), &mut std::io::stderr())
            .map_err(|e| Failure::error(format!("cannot ask for confirmation: {e}")))?;
    if confirmed { Ok(()) } else { Err(Failure::error("purge not confirmed: nothing deleted")) }
}

/// Writes `question` and reads one line: whether it is `yes` (or `y`).
fn ask(question: &str, input: &mut impl std::io::BufRead, output: &mut impl Write) -> std::io::Result<bool> {
    write!(output, "{question}")?;
    output.flush()?;
    let mut answer = String::new();
    input.read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "yes" | "y"))
}

/// The key ring of sealed rows (`encrypt = true`), when one is configured: `DLQ_KEYS` (and
/// `DLQ_ACTIVE_KEY`), or a key file named by `DLQ_KEYS_FILE`. Patches of sealed rows need it;
/// every other verb works without, and no verb ever prints what a key opens.
fn keys() -> Result<Option<dlq_core::sealed::KeyRing>, Failure> {
    use dlq_core::sealed::{EnvKeys, FileKeys, KeyProvider};
    let loaded = match std::env::var_os("DLQ_KEYS_FILE") {
        Some(path) => FileKeys::new(path).load(),
        None if std::env::var_os("DLQ_KEYS").is_some() => EnvKeys::new().load(),
        None => return Ok(None),
    };
    loaded.map(Some).map_err(|e| Failure::usage(e.to_string()))
}

/// A failed command: the one line to print and the exit code.
#[derive(Debug)]
pub(crate) struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    pub(crate) fn error(message: impl Into<String>) -> Self {
        Self { message: message.into(), code: exit::ERROR }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self { message: message.into(), code: exit::USAGE }
    }

    /// "nothing matched: {what}", exit code 4.
    pub(crate) fn nothing(what: impl std::fmt::Display) -> Self {
        Self { message: format!("nothing matched: {what}"), code: exit::NOTHING_MATCHED }
    }
}

impl From<Error> for Failure {
    fn from(err: Error) -> Self {
        // A type this binary has no handler for (`upgrade`): nothing done, as the table says.
        if matches!(err, Error::UnknownEventType { .. }) {
            return Self::nothing(dlq_core::admin::one_line(&err));
        }
        let mut message = dlq_core::admin::one_line(&err);
        // The PostgreSQL store names the role and the grant it lacks (`dlq roles`).
        if let Some(denied) = message.strip_prefix("dead-letter store failed: permission denied: role ") {
            return Self::error(format!("permission denied: role {denied}"));
        }
        if message.contains("permission denied") {
            message.push_str(" (this verb writes: the database role needs write rights on the dlq tables)");
        }
        Self::error(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_purge_goes_on_only_on_yes() {
        for (answer, go) in [("yes\n", true), ("Y\n", true), ("no\n", false), ("\n", false), ("", false)] {
            let mut shown = Vec::new();
            assert_eq!(ask("delete? ", &mut answer.as_bytes(), &mut shown).unwrap(), go, "{answer:?}");
            assert_eq!(shown, b"delete? ");
        }
    }
}
