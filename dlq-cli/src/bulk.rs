//! `dlq redrive`, `dlq discard` and `dlq patch --group`: a plan, a run with progress, Ctrl-C
//! after the batch.

use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dlq_core::CancellationToken;
use dlq_core::admin::{Admin, Bulk, BulkPlan, BulkProgress, Pacing};
use dlq_core::store::ActionKind;
use indicatif::{ProgressBar, ProgressStyle};

use crate::args::{BulkArgs, DiscardArgs, PatchArgs, RedriveArgs};
use crate::render::{Out, id_list};
use crate::{Failure, exit};

pub(crate) async fn redrive(admin: &Admin, args: &RedriveArgs, out: &Out) -> Result<ExitCode, Failure> {
    let pacing = Pacing { canary_wait: args.canary_wait, ..Pacing::default() };
    let bulk = match args.bulk.resume {
        Some(op) => {
            let bulk = overrides(admin.resume_as(op, ActionKind::Redrive).await?, &args.bulk);
            match args.canary {
                Some(rows) => bulk.canary(Some(rows)),
                None => bulk,
            }
        }
        None => {
            known_ids(admin, &args.bulk).await?;
            if args.validate {
                validate_first(admin, &args.bulk, out).await?;
            }
            let mut plan = BulkPlan::redrive(selection(&args.bulk)?, args.reason.as_deref().unwrap_or_default())
                .max_redrives(args.max_redrives);
            plan.canary = args.canary;
            plan.validate = args.validate;
            if args.force {
                plan = plan.force();
            }
            prepare(admin, plan, &args.bulk).await?
        }
    };
    run(bulk, pacing, out).await
}

/// `redrive --validate`: how the selected rows would decode, counted per group before any row
/// moves; the redrive is refused (exit 1, nothing moved) when a row would not decode. In text
/// the counts are printed either way; in JSON only with the refusal (the redrive's report
/// follows otherwise).
async fn validate_first(admin: &Admin, args: &BulkArgs, out: &Out) -> Result<(), Failure> {
    let mut filter = selection(args)?;
    filter.status = filter.status.or(Some(dlq_core::Status::FailedPermanently));
    let report = admin.validation(filter, args.max.unwrap_or(u64::MAX)).await?;
    if !report.passes() || !out.json {
        out.validation(&report);
    }
    if report.passes() {
        return Ok(());
    }
    if report.failing() == 0 {
        return Err(Failure::error(format!(
            "redrive refused by --validate: {} (above); nothing moved",
            report
                .mismatches
                .iter()
                .map(|m| format!("`{}` version {} was published with two event shapes", m.event_type, m.version))
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Err(Failure::error(format!(
        "redrive refused by --validate: {} of {} rows would not decode (first errors above); nothing moved",
        report.failing(),
        report.checked
    )))
}

pub(crate) async fn discard(admin: &Admin, args: &DiscardArgs, out: &Out) -> Result<ExitCode, Failure> {
    let bulk = match args.bulk.resume {
        Some(op) => overrides(admin.resume_as(op, ActionKind::Discard).await?, &args.bulk),
        None => {
            known_ids(admin, &args.bulk).await?;
            let plan = BulkPlan::discard(selection(&args.bulk)?, args.reason.as_deref().unwrap_or_default());
            prepare(admin, plan, &args.bulk).await?
        }
    };
    run(bulk, Pacing::default(), out).await
}

/// `dlq patch --group` (`plan`, stored here) or `dlq patch --resume N` (no plan).
pub(crate) async fn patch(
    admin: &Admin,
    plan: Option<BulkPlan>,
    args: &PatchArgs,
    out: &Out,
) -> Result<ExitCode, Failure> {
    let bulk = match (plan, args.resume) {
        (_, Some(op)) => {
            let mut bulk = admin.resume_as(op, ActionKind::Patch).await?;
            if let Some(rate) = args.rate {
                bulk = bulk.rate(Some(rate));
            }
            match args.batch {
                Some(rows) => bulk.batch(rows),
                None => bulk,
            }
        }
        (Some(plan), None) => {
            if !admin.selects_any(&plan.filter).await? {
                let group = plan.filter.fingerprint.as_deref().unwrap_or_default();
                return Err(Failure::nothing(format!("no FAILED_PERMANENTLY row in group `{group}`")));
            }
            admin.start(plan).await?
        }
        (None, None) => return Err(Failure::usage("say which rows: an id, --group FP, or --resume N")),
    };
    run(bulk, Pacing::default(), out).await
}

/// A resumed run at the `--rate` and `--batch` given, else at the stored operation's.
fn overrides<'a>(mut bulk: Bulk<'a>, args: &BulkArgs) -> Bulk<'a> {
    if let Some(rate) = args.rate {
        bulk = bulk.rate(Some(rate));
    }
    if let Some(rows) = args.batch {
        bulk = bulk.batch(rows);
    }
    bulk
}

fn selection(args: &BulkArgs) -> Result<dlq_core::ListFilter, Failure> {
    args.selection().ok_or_else(|| Failure::usage("say which rows: ids, a filter (e.g. --group FP), or --all"))
}

/// Every id named must be a row's: an unknown one refuses the whole list, naming each
/// unknown id, before anything is checked, stored or moved (exit 4), so that a typo in a list
/// is never passed over while the rest move.
async fn known_ids(admin: &Admin, args: &BulkArgs) -> Result<(), Failure> {
    let unknown = admin.unknown_ids(&args.ids).await?;
    if unknown.is_empty() {
        return Ok(());
    }
    let of = if args.ids.len() > 1 { format!(" (of {})", id_list(&args.ids)) } else { String::new() };
    let what = if unknown.len() == 1 { "id" } else { "ids" };
    Err(Failure::nothing(format!("no row with {what} {}{of}: nothing done", id_list(&unknown))))
}

/// The plan, checked to select at least one row (a selection that matches nothing is
/// refused before any operation is stored), then stored, or dry.
async fn prepare<'a>(admin: &'a Admin, mut plan: BulkPlan, args: &BulkArgs) -> Result<Bulk<'a>, Failure> {
    if let Some(rows) = args.batch {
        plan = plan.batch(rows);
    }
    plan.max = args.max;
    plan.rate = args.rate;
    if !admin.selects_any(&plan.filter).await? {
        return Err(Failure::nothing(unmatched(&plan, args)));
    }
    Ok(if args.dry_run { admin.dry_run(plan)? } else { admin.start(plan).await? })
}

/// What selected nothing, in the words of the command line.
fn unmatched(plan: &BulkPlan, args: &BulkArgs) -> String {
    if !args.ids.is_empty() {
        return format!("no row with id {} matches the other filters", id_list(&args.ids));
    }
    let f = &args.filter;
    let mut by = Vec::new();
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            by.push(format!("--{name} {value}"));
        }
    };
    flag("group", f.group.clone());
    flag("event-type", f.event_type.clone());
    flag("kind", f.kind.clone());
    flag("reason-contains", f.reason_contains.clone());
    flag("since", f.since.map(|t| t.to_rfc3339()));
    flag("until", f.until.map(|t| t.to_rfc3339()));
    let status = plan.filter.status.map_or_else(String::new, |s| format!("{s} "));
    if by.is_empty() {
        return format!("no {status}row to {}", plan.action.as_str());
    }
    format!("no {status}row matches {} (`dlq stats` lists the groups)", by.join(" "))
}

/// How a run ended, beyond its report.
#[derive(Default)]
struct Stop {
    /// Ctrl-C was pressed.
    interrupted: AtomicBool,
}

async fn run(bulk: Bulk<'_>, pacing: Pacing, out: &Out) -> Result<ExitCode, Failure> {
    let stop = Arc::new(Stop::default());
    let token = CancellationToken::new();
    let ctrl_c = interrupt(Arc::clone(&stop), token.clone())?;
    let resume = bulk.operation().map(|op| format!("dlq {} --resume {}", op.action.as_str(), op.id));
    if let (Some(op), Some(resume)) = (bulk.operation(), &resume) {
        let pace = bulk.plan().rate.map_or_else(String::new, |rate| format!(", at most {rate} rows/s"));
        out.note(&format!("operation {} ({}{pace}), resume with `{resume}`", op.id, op.action.as_str()));
    }
    // Whatever ends the run early (Ctrl-C, a closed output, an error) says how to go on.
    let stopped = |out: &Out| {
        if let Some(resume) = &resume {
            out.err_line(&format!("stopped: resume with `{resume}`"));
        }
    };
    let progress = Progress::new(out);
    // A dry run moves nothing, and its progress says so.
    let (dry, action) = (bulk.operation().is_none(), bulk.plan().action);
    let line = |p: &BulkProgress| match (dry, action) {
        (true, action) => format!(
            "read {}: {} would {}, {} would be refused (cursor {})",
            p.batch,
            p.moved,
            action.as_str(),
            p.refused,
            p.cursor
        ),
        (false, action) => {
            let moved = if action == ActionKind::Patch { "patched" } else { "moved" };
            format!("batch {}: {} {moved}, {} refused (cursor {})", p.batch, p.moved, p.refused, p.cursor)
        }
    };
    let report = bulk
        .stop_on(token.clone())
        .run(pacing, |p| {
            progress.show(&line(p), out);
            // A closed output (`dlq redrive … 2>&1 | head`) stops the run here, between
            // batches, as Ctrl-C does: the operation stays resumable.
            if out.failed().is_some() {
                token.cancel();
            }
            if token.is_cancelled() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        })
        .await;
    ctrl_c.abort();
    progress.finish();
    let report = report.inspect_err(|_| stopped(out))?;
    out.bulk(&report);
    let interrupted = stop.interrupted.load(Ordering::SeqCst);
    if interrupted || out.failed().is_some() {
        stopped(out);
    }
    Ok(if interrupted {
        ExitCode::from(exit::INTERRUPTED)
    } else if report.canary_stop.is_some() {
        ExitCode::from(exit::CANARY_STOPPED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Ctrl-C stops the run after the batch in flight (at once while it paces or waits for a
/// canary); a second Ctrl-C ends the process at once (exit 130: the batch in flight rolls
/// back with its connection, the operation's cursor stays at the last batch that committed).
/// The handler is in place before the first batch moves.
fn interrupt(stop: Arc<Stop>, token: CancellationToken) -> Result<tokio::task::JoinHandle<()>, Failure> {
    #[cfg(unix)]
    {
        let mut signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| Failure::error(format!("cannot watch for Ctrl-C: {e}")))?;
        Ok(tokio::spawn(async move {
            if signal.recv().await.is_some() {
                stop.interrupted.store(true, Ordering::SeqCst);
                token.cancel();
            }
            if signal.recv().await.is_some() {
                eprintln!("aborted");
                std::process::exit(i32::from(exit::INTERRUPTED));
            }
        }))
    }
    #[cfg(not(unix))]
    {
        Ok(tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.interrupted.store(true, Ordering::SeqCst);
                token.cancel();
            }
        }))
    }
}

/// A progress bar on a terminal, a line per batch otherwise, nothing with `--json`.
enum Progress {
    Bar(ProgressBar),
    Lines,
    Quiet,
}

impl Progress {
    fn new(out: &Out) -> Self {
        if out.json {
            return Self::Quiet;
        }
        if !std::io::stderr().is_terminal() {
            return Self::Lines;
        }
        let bar = ProgressBar::new_spinner();
        let style = ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        bar.set_style(style);
        Self::Bar(bar)
    }

    /// Progress after a batch, in one line.
    fn show(&self, line: &str, out: &Out) {
        let line = line.to_owned();
        match self {
            Self::Bar(bar) => bar.set_message(line),
            Self::Lines => out.err_line(&line),
            Self::Quiet => {}
        }
    }

    fn finish(&self) {
        if let Self::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
