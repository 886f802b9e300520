//! Bulk actions run in the background: a confirmed redrive or discard becomes a stored
//! operation (`dlq_operations`, as `dlq redrive` makes), runs batch by batch at the rate the
//! operator chose, and has a page, `GET /operations/{id}`, that follows it (reloading itself
//! while it runs) and offers to resume it when it stopped: a canary that failed, a restart of
//! the service mid-run, or another process's run that died. `dlq redrive --resume ID` resumes
//! the same operation from a terminal, and the other way round.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Mutex;

use axum::Form;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use dlq_core::admin::{Admin, BulkPlan, BulkReport, Pacing};
use dlq_core::store::{Operation, OperationState};
use maud::html;
use serde::Deserialize;

use crate::Console;
use crate::error::Failure;
use crate::extract::Param;
use crate::pages::{Acting, report_details};
use crate::view::{self, Base};

/// At most this many finished runs are remembered (their reports: refusals, canary stops).
const KEEP: usize = 64;

/// The runs this process started, by operation id.
#[derive(Default)]
pub(crate) struct Runs {
    runs: Mutex<HashMap<i64, Run>>,
}

/// One run in this process: under way, or its outcome.
#[derive(Clone)]
enum Run {
    Running,
    Finished(Box<BulkReport>),
    Failed(String),
}

impl Runs {
    fn get(&self, id: i64) -> Option<Run> {
        self.lock().get(&id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Run>> {
        self.runs.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Marks `id` running; false when it already runs here.
    fn claim(&self, id: i64) -> bool {
        let mut runs = self.lock();
        if matches!(runs.get(&id), Some(Run::Running)) {
            return false;
        }
        if runs.len() >= KEEP {
            let done: Vec<i64> = runs.iter().filter(|(_, r)| !matches!(r, Run::Running)).map(|(k, _)| *k).collect();
            for k in done.into_iter().take(runs.len() + 1 - KEEP) {
                runs.remove(&k);
            }
        }
        runs.insert(id, Run::Running);
        true
    }

    fn finish(&self, id: i64, run: Run) {
        self.lock().insert(id, run);
    }
}

impl Console {
    /// Runs operation `id` (stored, not done) in a background task with `pacing`, at `rate`
    /// when given, else at its stored rate.
    ///
    /// # Errors
    /// A conflict when this process runs it already.
    pub(crate) fn spawn_run(&self, admin: Admin, id: i64, pacing: Pacing, rate: Option<f64>) -> Result<(), Failure> {
        if !self.runs.claim(id) {
            return Err(Failure::new(StatusCode::CONFLICT, format!("operation {id} is running already")));
        }
        let console = self.clone();
        tokio::spawn(async move {
            let outcome = match admin.resume(id).await {
                Ok(bulk) => {
                    let bulk = if rate.is_some() { bulk.rate(rate) } else { bulk };
                    bulk.run(pacing, |_| ControlFlow::Continue(())).await
                }
                Err(error) => Err(error),
            };
            let run = match outcome {
                Ok(report) => Run::Finished(Box::new(report)),
                Err(error) => {
                    tracing::warn!(operation = id, %error, "a bulk action of the console failed; it can be resumed");
                    Run::Failed(dlq_core::admin::one_line(&error))
                }
            };
            console.runs.finish(id, run);
            console.forget_snapshots();
        });
        Ok(())
    }

    /// Stores `plan` as an operation and runs it in the background; returns its id.
    pub(crate) async fn start_run(&self, admin: &Admin, plan: BulkPlan, pacing: Pacing) -> Result<i64, Failure> {
        let started = admin.start(plan).await?;
        let id = started
            .operation()
            .map(|op| op.id)
            .ok_or_else(|| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "the operation was not stored"))?;
        drop(started);
        self.spawn_run(admin.clone(), id, pacing, None)?;
        Ok(id)
    }
}

/// `GET /operations/{id}`.
pub(crate) async fn page(
    State(console): State<Console>,
    base: Base,
    Param(id): Param<i64>,
) -> Result<axum::response::Response, Failure> {
    let op = operation(&console, id).await?;
    let run = console.runs.get(id);
    let running_here = matches!(run, Some(Run::Running));
    let resumable = op.state != OperationState::Done && !running_here;
    let verb = match op.action {
        dlq_core::store::ActionKind::Redrive => "Redrive",
        _ => "Discard",
    };
    let body = html! {
        dl.facts {
            dt { "action" } dd { (verb) }
            dt { "state" } dd { @if running_here { "running in this service" } @else { (op.state.as_str()) } }
            dt { "by" } dd { (op.note.actor) }
            dt { "reason" } dd { (op.note.reason.as_deref().unwrap_or("")) }
            dt { "started" } dd { (view::time(op.created_at)) }
            dt { "last batch" } dd { (view::time(op.updated_at)) }
            dt { "cursor" } dd { "row " (op.cursor) }
        }
        p.summary { "Moved " strong.moved { (op.moved) } " rows; refused " strong { (op.refused) } "." }
        @match &run {
            Some(Run::Finished(report)) => { (report_details(report)) }
            Some(Run::Failed(why)) => { p.warn { "The run failed: " (why) } }
            _ => {}
        }
        @if resumable && console.options.actions {
            form method="post" action=(base.url(&format!("/operations/{id}/resume"))) {
                p { "This operation is not done: resume it from row " (op.cursor) " (or run "
                    code { "dlq redrive --resume " (id) } " in a terminal)." }
                label { "Rows per second " input name="rate" type="number" min="0.01" step="any" placeholder="as stored"; }
                button type="submit" { "Resume" }
            }
        }
        p { a href=(back(&base, &op)) { "← back" } }
    };
    let refresh = running_here.then_some(1);
    let title = format!("{verb}: operation {id}");
    Ok(crate::pages::render(view::page(&base, &title, refresh, body)))
}

/// Operation `id`, or a 404 naming it.
async fn operation(console: &Console, id: i64) -> Result<Operation, Failure> {
    console
        .admin
        .store()
        .operation(id)
        .await?
        .ok_or_else(|| Failure::new(StatusCode::NOT_FOUND, format!("no operation {id}")))
}

/// Where the operation's rows are: its group, its one row, or the overview.
fn back(base: &Base, op: &Operation) -> String {
    let plan: Option<BulkPlan> = serde_json::from_value(op.spec.clone()).ok();
    let filter = plan.map(|p| p.filter);
    match filter {
        Some(f) if f.fingerprint.is_some() => base.group(&f.fingerprint.unwrap_or_default(), "", &[]),
        Some(f) if f.ids.len() == 1 => base.url(&format!("/events/{}", f.ids[0])),
        _ => base.url("/"),
    }
}

/// The resume form.
#[derive(Debug, Deserialize)]
pub(crate) struct ResumeForm {
    rate: Option<String>,
}

/// `POST /operations/{id}/resume`.
pub(crate) async fn resume(
    State(console): State<Console>,
    base: Base,
    Acting(admin): Acting,
    Param(id): Param<i64>,
    Form(form): Form<ResumeForm>,
) -> Result<impl IntoResponse, Failure> {
    let rate = crate::pages::rate(form.rate.as_deref())?;
    // Refused here, with one line, rather than by the background run.
    if operation(&console, id).await?.state == OperationState::Done {
        return Err(Failure::new(StatusCode::CONFLICT, format!("operation {id} is done: nothing to resume")));
    }
    console.spawn_run(admin, id, Pacing::default(), rate)?;
    Ok(Redirect::to(&base.url(&format!("/operations/{id}"))))
}
