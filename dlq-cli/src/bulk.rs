//! `dlq redrive` and `dlq discard`: a plan, a run with progress, Ctrl-C after the batch.

use std::io::IsTerminal;
use std::ops::ControlFlow;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use dlq_core::admin::{Admin, Bulk, BulkPlan, BulkProgress, Pacing};
use indicatif::{ProgressBar, ProgressStyle};

use crate::Failure;
use crate::args::{BulkArgs, DiscardArgs, RedriveArgs};
use crate::render::Out;

/// Exit code of a redrive a canary stopped.
const CANARY_STOPPED: u8 = 3;

pub(crate) async fn redrive(admin: &Admin, args: &RedriveArgs, out: &Out) -> Result<ExitCode, Failure> {
    let pacing = Pacing { rate: args.bulk.rate, canary_wait: args.canary_wait, ..Pacing::default() };
    let bulk = match args.bulk.resume {
        Some(op) => admin.resume(op).await?,
        None => {
            let mut plan = BulkPlan::redrive(selection(&args.bulk)?, args.reason.as_deref().unwrap_or_default())
                .batch(args.bulk.batch)
                .max_redrives(args.max_redrives);
            plan.max = args.bulk.max;
            plan.canary = args.canary;
            plan.validate = args.validate;
            if args.force {
                plan = plan.force();
            }
            prepare(admin, plan, args.bulk.dry_run).await?
        }
    };
    run(bulk, pacing, out).await
}

pub(crate) async fn discard(admin: &Admin, args: &DiscardArgs, out: &Out) -> Result<ExitCode, Failure> {
    let pacing = Pacing { rate: args.bulk.rate, ..Pacing::default() };
    let bulk = match args.bulk.resume {
        Some(op) => admin.resume(op).await?,
        None => {
            let mut plan = BulkPlan::discard(selection(&args.bulk)?, args.reason.as_deref().unwrap_or_default())
                .batch(args.bulk.batch);
            plan.max = args.bulk.max;
            prepare(admin, plan, args.bulk.dry_run).await?
        }
    };
    run(bulk, pacing, out).await
}

fn selection(args: &BulkArgs) -> Result<dlq_core::ListFilter, Failure> {
    args.selection().ok_or_else(|| Failure::usage("say which rows: ids, a filter (e.g. --group FP), or --all"))
}

async fn prepare(admin: &Admin, plan: BulkPlan, dry_run: bool) -> Result<Bulk<'_>, Failure> {
    Ok(if dry_run { admin.dry_run(plan)? } else { admin.start(plan).await? })
}

async fn run(bulk: Bulk<'_>, pacing: Pacing, out: &Out) -> Result<ExitCode, Failure> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            flag.store(true, Ordering::SeqCst);
        }
    });
    if let Some(op) = bulk.operation() {
        out.note(&format!("operation {} ({}), resume with --resume {}", op.id, op.action.as_str(), op.id));
    }
    let progress = Progress::new(out);
    let report = bulk
        .run(pacing, |p| {
            progress.show(p);
            if stop.load(Ordering::SeqCst) { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        })
        .await;
    ctrl_c.abort();
    progress.finish();
    let report = report?;
    out.bulk(&report);
    Ok(if report.canary_stop.is_some() { ExitCode::from(CANARY_STOPPED) } else { ExitCode::SUCCESS })
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

    fn show(&self, p: &BulkProgress) {
        let line = format!("batch {}: {} moved, {} refused (cursor {})", p.batch, p.moved, p.refused, p.cursor);
        match self {
            Self::Bar(bar) => bar.set_message(line),
            Self::Lines => eprintln!("{line}"),
            Self::Quiet => {}
        }
    }

    fn finish(&self) {
        if let Self::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
