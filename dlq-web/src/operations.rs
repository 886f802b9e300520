//! Bulk actions run in the background: a confirmed redrive, discard or group patch becomes a
//! stored operation (`dlq_operations`, as `dlq redrive` makes), runs batch by batch at the rate the
//! operator chose, and has a page, `GET /operations/{id}`, that follows it (reloading itself
//! while it runs) and offers to resume it when it stopped: a canary that failed, a restart of
//! the service mid-run, or another process's run that died. `dlq redrive --resume ID` (`dlq
//! discard`, `dlq patch`) resumes the same operation from a terminal, and the other way round.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

use axum::Form;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect};
use dlq_core::CancellationToken;
use dlq_core::admin::{Admin, BulkPlan, BulkReport, Pacing};
use dlq_core::store::{Operation, OperationState};
use maud::html;
use serde::Deserialize;

use crate::Console;
use crate::error::Failure;
use crate::extract::Param;
use crate::pages::{Acting, report_details};
use crate::view::{self, Base};

/// The console's background runs (confirmed redrives, discards and group patches), for a
/// graceful shutdown:
/// give the same value to [`Options::background`](crate::Options::background), then, once the
/// server has stopped, [`shutdown`](Self::shutdown) stops every run after its batch in flight
/// and waits until each has stored its operation as `stopped`, resumable from its cursor
/// (from the operation's page, or `dlq redrive --resume ID`, `dlq patch --resume ID` for a
/// patch). A run cut short by the end of
/// the process instead stays `running` in the store until resumed.
///
/// ```no_run
/// use dlq_core::admin::Admin;
///
/// # async fn demo(admin: Admin, shutdown_signal: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
/// let background = dlq_web::Background::new();
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
/// let options = dlq_web::Options::default().allow_actions(true).bound_to(listener.local_addr()?);
/// let app = dlq_web::router(admin, options.background(background.clone()));
/// axum::serve(listener, app).with_graceful_shutdown(shutdown_signal).await?; // Ctrl-C, SIGTERM …
/// background.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Background {
    stop: CancellationToken,
    running: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Default for Background {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Background")
            .field("stopping", &self.stop.is_cancelled())
            .field("running", &*self.running.borrow())
            .finish()
    }
}

impl Background {
    /// No run yet.
    pub fn new() -> Self {
        Self { stop: CancellationToken::new(), running: Arc::new(tokio::sync::watch::Sender::new(0)) }
    }

    /// Stops every run (at once while it paces or waits for a canary, else after the batch in
    /// flight commits), refuses new ones, and returns when each has stored its state.
    pub async fn shutdown(&self) {
        self.stop.cancel();
        let mut running = self.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }

    /// Counts a run in until the guard drops; `None` once shutting down.
    fn enter(&self) -> Option<Entered> {
        self.running.send_modify(|n| *n += 1);
        let entered = Entered(Arc::clone(&self.running));
        (!self.stop.is_cancelled()).then_some(entered)
    }
}

/// One run counted in [`Background`].
struct Entered(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

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
        let background = &self.options.background;
        let Some(entered) = background.enter() else {
            let why = format!("the console is shutting down: operation {id} stays resumable");
            return Err(Failure::new(StatusCode::SERVICE_UNAVAILABLE, why));
        };
        if !self.runs.claim(id) {
            return Err(Failure::new(StatusCode::CONFLICT, format!("operation {id} is running already")));
        }
        let console = self.clone();
        let stop = background.stop.clone();
        tokio::spawn(async move {
            let _entered = entered;
            let outcome = match admin.resume(id).await {
                Ok(bulk) => {
                    let bulk = if rate.is_some() { bulk.rate(rate) } else { bulk };
                    bulk.stop_on(stop).run(pacing, |_| ControlFlow::Continue(())).await
                }
                Err(error) => Err(error),
            };
            let run = match outcome {
                Ok(report) => {
                    let state = report.state.as_str();
                    let (moved, refused) = (report.moved, report.refused);
                    tracing::info!(target: "dlq_web", operation = id, state, moved, refused, "console operation ran");
                    Run::Finished(Box::new(report))
                }
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
        if self.options.background.stop.is_cancelled() {
            let why = "the console is shutting down: no new operation is started";
            return Err(Failure::new(StatusCode::SERVICE_UNAVAILABLE, why));
        }
        let (verb, subject, reason) = (plan.action.as_str(), selection(&plan.filter), plan.reason.clone());
        let started = admin.start(plan).await?;
        let id = started
            .operation()
            .map(|op| op.id)
            .ok_or_else(|| Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "the operation was not stored"))?;
        drop(started);
        crate::log::action(verb, &format!("operation {id}: {subject}"), admin.actor(), reason.as_deref().unwrap_or(""));
        self.spawn_run(admin.clone(), id, pacing, None)?;
        Ok(id)
    }
}

/// The rows of a selection, for a log line: its group, its ids, or its filter.
pub(crate) fn selection(filter: &dlq_core::ListFilter) -> String {
    match (&filter.fingerprint, filter.ids.as_slice()) {
        (Some(group), _) => format!("group {group}"),
        (None, [id]) => format!("row {id}"),
        (None, ids) if !ids.is_empty() => format!("{} rows from {}", ids.len(), ids[0]),
        _ => "the rows of a filter".to_owned(),
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
        dlq_core::store::ActionKind::Discard => "Discard",
        dlq_core::store::ActionKind::Patch => "Patch",
    };
    let body = html! {
        dl.facts {
            dt { "action" } dd { (verb) }
            dt { "state" } dd { @if running_here { "running in this service" } @else { (op.state.as_str()) } }
            dt { "by" } dd { (view::line(&op.note.actor)) }
            dt { "reason" } dd { (view::text(op.note.reason.as_deref().unwrap_or(""))) }
            dt { "started" } dd { (view::time(op.created_at)) }
            dt { "last batch" } dd { (view::time(op.updated_at)) }
            dt { "cursor" } dd { "row " (op.cursor) }
        }
        p.summary {
            @if op.action == dlq_core::store::ActionKind::Patch { "Patched " } @else { "Moved " }
            strong.moved { (op.moved) } " rows; refused " strong { (op.refused) } "."
        }
        @match &run {
            Some(Run::Finished(report)) => { (report_details(report)) }
            Some(Run::Failed(why)) => { p.warn { "The run failed: " (view::text(why)) } }
            _ => {}
        }
        @if resumable && console.options.actions {
            form method="post" action=(base.url(&format!("/operations/{id}/resume"))) {
                p { "This operation is not done: resume it from row " (op.cursor) " (or run "
                    code { "dlq " (op.action.as_str()) " --resume " (id) } " in a terminal)." }
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
    console.spawn_run(admin.clone(), id, Pacing::default(), rate)?;
    crate::log::action("resume", &format!("operation {id}"), admin.actor(), "");
    Ok(Redirect::to(&base.url(&format!("/operations/{id}"))))
}
