//! Bulk redrive and discard: batches of one transaction each, in ascending id order, with
//! the operation and its cursor stored so that any machine can resume it; rate limit, `max`,
//! loop guard, validation, canary.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Admin, required};
use crate::Error;
use crate::record::{DeadLetter, DlqId, ListFilter, Status};
use crate::store::{ActionKind, BatchAction, Operation, OperationState, OperationStep, Refusal, Refused, refusal};

/// A service's own check of a row before it is redriven, beside the registry's decode check
/// ([`Admin::check`]): `Err(message)` refuses it.
pub type Validator = Arc<dyn Fn(&DeadLetter) -> Result<(), String> + Send + Sync>;

/// What a bulk action does to which rows; stored with the operation, so a resume on another
/// machine continues with the same selection and options.
///
/// ```
/// use dlq_core::admin::BulkPlan;
/// use dlq_core::ListFilter;
///
/// let plan = BulkPlan::redrive(ListFilter::default().fingerprint("9f2c41d07a3b5e18"), "ledger is back")
///     .batch(50)
///     .max(1_000)
///     .canary(5);
/// assert_eq!(plan.max_redrives, Some(3)); // the loop guard, unless `.force()`
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkPlan {
    /// Redrive or discard.
    pub action: ActionKind,
    /// The selection (its `order`, `after` and `limit` are ignored: rows are walked oldest first).
    pub filter: ListFilter,
    /// Why, for the audit log (required for a discard).
    pub reason: Option<String>,
    /// Rows per transaction.
    pub batch: usize,
    /// Stop after moving this many rows (over every run of the operation).
    pub max: Option<u64>,
    /// Refuse rows already redriven this many times; `None` (forced) for no limit.
    pub max_redrives: Option<u32>,
    /// Refuse rows that [`Admin::check`] rejects: payloads that do not deserialize into the
    /// handler's event type (with a registry), rows the [`Validator`] refuses.
    pub validate: bool,
    /// Redrive this many rows first, wait for their outcome, and go on (waiting after each
    /// batch) only while they succeed.
    pub canary: Option<usize>,
}

/// The default loop guard: a row may be redriven at most this many times without `force`.
pub const DEFAULT_MAX_REDRIVES: u32 = 3;

impl BulkPlan {
    fn new(action: ActionKind, filter: ListFilter, reason: Option<String>) -> Self {
        Self {
            action,
            filter,
            reason,
            batch: 100,
            max: None,
            max_redrives: Some(DEFAULT_MAX_REDRIVES),
            validate: false,
            canary: None,
        }
    }

    /// Redrives the `FAILED_PERMANENTLY` rows of `filter` (its status, when unset). Named
    /// ids are taken whatever their status, so that a row that cannot move is reported as
    /// refused rather than passed over.
    pub fn redrive(filter: ListFilter, reason: &str) -> Self {
        let reason = Some(reason.trim()).filter(|r| !r.is_empty()).map(str::to_owned);
        let mut filter = filter;
        if filter.ids.is_empty() {
            filter.status = filter.status.or(Some(Status::FailedPermanently));
        }
        Self::new(ActionKind::Redrive, filter, reason)
    }

    /// Discards the rows of `filter`.
    pub fn discard(filter: ListFilter, reason: &str) -> Self {
        Self::new(ActionKind::Discard, filter, Some(reason.to_owned()))
    }

    /// Rows per transaction (at least 1).
    #[must_use]
    pub fn batch(mut self, rows: usize) -> Self {
        self.batch = rows.max(1);
        self
    }

    /// At most `rows` moved.
    #[must_use]
    pub const fn max(mut self, rows: u64) -> Self {
        self.max = Some(rows);
        self
    }

    /// The loop guard's limit.
    #[must_use]
    pub const fn max_redrives(mut self, times: u32) -> Self {
        self.max_redrives = Some(times);
        self
    }

    /// No loop guard.
    #[must_use]
    pub const fn force(mut self) -> Self {
        self.max_redrives = None;
        self
    }

    /// Validate each row first.
    #[must_use]
    pub const fn validate(mut self) -> Self {
        self.validate = true;
        self
    }

    /// Canary of `rows` rows.
    #[must_use]
    pub const fn canary(mut self, rows: usize) -> Self {
        self.canary = Some(rows);
        self
    }

    fn check(&self) -> Result<(), Error> {
        if self.action == ActionKind::Discard {
            required(self.reason.as_deref().unwrap_or_default(), "discard")?;
        }
        if self.action == ActionKind::Redrive && self.filter.status.is_some_and(|s| s != Status::FailedPermanently) {
            return Err(Error::Invalid("only FAILED_PERMANENTLY rows can be redriven".into()));
        }
        if self.canary.is_some() && self.action != ActionKind::Redrive {
            return Err(Error::Invalid("a canary applies to redrives only".into()));
        }
        Ok(())
    }
}

/// How fast a run goes and how long a canary waits; given per run, not stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pacing {
    /// Rows per second at most (`None`: as fast as the store goes).
    pub rate: Option<f64>,
    /// How long a canary waits for its rows' outcome before it stops.
    pub canary_wait: Duration,
    /// How often a canary looks at its rows.
    pub poll: Duration,
}

impl Pacing {
    /// A rate as operators write it, `200/s` or `200`: rows per second, above zero (what
    /// `dlq redrive --rate` and the console's rate field read).
    ///
    /// # Errors
    /// One line naming the text, for anything else.
    ///
    /// ```
    /// use dlq_core::admin::Pacing;
    /// assert_eq!(Pacing::parse_rate("200/s"), Ok(200.0));
    /// assert!(Pacing::parse_rate("0/s").is_err() && Pacing::parse_rate("fast").is_err());
    /// ```
    pub fn parse_rate(text: &str) -> Result<f64, String> {
        let number = text.strip_suffix("/s").unwrap_or(text);
        match number.trim().parse::<f64>() {
            Ok(rate) if rate > 0.0 && rate.is_finite() => Ok(rate),
            _ => Err(format!("`{text}` is not a rate like 200/s")),
        }
    }
}

impl Default for Pacing {
    fn default() -> Self {
        Self { rate: None, canary_wait: Duration::from_secs(60), poll: Duration::from_millis(200) }
    }
}

/// Progress after each batch, for a progress bar or a log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BulkProgress {
    /// The operation (`None` for a dry run).
    pub operation: Option<i64>,
    /// The batch's number in this run, from 1.
    pub batch: u64,
    /// Rows moved so far (all runs).
    pub moved: u64,
    /// Rows refused so far (all runs).
    pub refused: u64,
    /// The last id handled.
    pub cursor: DlqId,
}

/// A row of the canary that failed again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CanaryFailure {
    /// The row.
    pub id: DlqId,
    /// Its status now.
    pub status: Status,
    /// The failure's fingerprint now.
    pub fingerprint: String,
    /// Whether it is the fingerprint it was parked with: the cause is not fixed.
    pub same_fingerprint: bool,
    /// The failure's reason now.
    pub reason: String,
}

/// Why a canary stopped the operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CanaryStop {
    /// Rows failed again.
    Failed {
        /// Those rows.
        failures: Vec<CanaryFailure>,
    },
    /// Rows had no outcome in time (is a retrier running for their type?).
    NoOutcome {
        /// Those rows.
        waiting: Vec<DlqId>,
    },
}

/// What a bulk run did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BulkReport {
    /// The operation (`None` for a dry run): `--resume` it.
    pub operation: Option<i64>,
    /// The action.
    pub action: ActionKind,
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Rows moved (would move, in a dry run), over every run of the operation.
    pub moved: u64,
    /// Rows refused, over every run.
    pub refused: u64,
    /// The rows moved by this run (or that would move).
    pub moved_ids: Vec<DlqId>,
    /// The rows refused by this run, and why.
    pub refusals: Vec<Refusal>,
    /// The operation's state after this run.
    pub state: OperationState,
    /// Set when a canary stopped the run.
    pub canary_stop: Option<CanaryStop>,
    /// The last id handled.
    pub cursor: DlqId,
}

/// A bulk operation ready to run: [`Admin::start`], [`Admin::resume`] or [`Admin::dry_run`].
#[derive(Debug)]
pub struct Bulk<'a> {
    admin: &'a Admin,
    plan: BulkPlan,
    op: Option<Operation>,
}

impl Admin {
    /// Stores a new bulk operation for `plan` (nothing moves until [`Bulk::run`]).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a plan that cannot run (a discard without reason, a validating
    /// redrive on an admin that can validate nothing); the store's.
    pub async fn start(&self, plan: BulkPlan) -> Result<Bulk<'_>, Error> {
        self.check_plan(&plan)?;
        let spec = serde_json::to_value(&plan).map_err(Error::Serialize)?;
        let op = self.store.create_operation(plan.action, spec, self.note(plan.reason.as_deref())).await?;
        Ok(Bulk { admin: self, plan, op: Some(op) })
    }

    /// Continues a stored operation from its cursor, with its stored plan.
    ///
    /// # Errors
    /// [`Error::OperationNotFound`]; [`Error::Invalid`] when it is done, or validates and
    /// this admin can validate nothing; the store's error.
    pub async fn resume(&self, operation: i64) -> Result<Bulk<'_>, Error> {
        let op = self.store.operation(operation).await?.ok_or(Error::OperationNotFound(operation))?;
        if op.state == OperationState::Done {
            return Err(Error::Invalid(format!("operation {operation} is done: nothing to resume")));
        }
        let plan: BulkPlan = serde_json::from_value(op.spec.clone())
            .map_err(|e| Error::Invalid(format!("operation {operation} has an unreadable plan: {e}")))?;
        self.check_plan(&plan)?;
        self.store.set_operation_state(operation, OperationState::Running).await?;
        Ok(Bulk { admin: self, plan, op: Some(op) })
    }

    /// What `plan` would move and refuse, changing nothing.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn dry_run(&self, plan: BulkPlan) -> Result<Bulk<'_>, Error> {
        self.check_plan(&plan)?;
        Ok(Bulk { admin: self, plan, op: None })
    }

    /// The plan can run here: a validating plan needs a registry or a validator (a resumed
    /// one too, so that a validating redrive is never continued without its checks).
    fn check_plan(&self, plan: &BulkPlan) -> Result<(), Error> {
        plan.check()?;
        if plan.validate && plan.action == ActionKind::Redrive && !self.can_validate() {
            return Err(Error::Invalid(super::NO_VALIDATION.into()));
        }
        Ok(())
    }
}

/// The state of one run.
struct Run {
    report: BulkReport,
    batches: u64,
    started: tokio::time::Instant,
    this_run: u64,
}

impl Bulk<'_> {
    /// The stored operation (`None` for a dry run).
    pub const fn operation(&self) -> Option<&Operation> {
        self.op.as_ref()
    }

    /// The plan.
    pub const fn plan(&self) -> &BulkPlan {
        &self.plan
    }

    /// Runs batch after batch until every matching row is handled, `max` is reached,
    /// `progress` says stop (after the current batch: the operation stays resumable), or a
    /// canary fails.
    ///
    /// # Errors
    /// The store's error (the batch in flight is rolled back; resume continues there);
    /// [`Error::Conflict`] when another process runs the same operation.
    pub async fn run(
        self,
        pacing: Pacing,
        mut progress: impl FnMut(&BulkProgress) -> ControlFlow<()>,
    ) -> Result<BulkReport, Error> {
        let mut run = self.begin();
        let state = loop {
            let size = self.next_size(&run);
            if size == 0 {
                break OperationState::Done;
            }
            let filter = self.plan.filter.clone().oldest_first().after(run.report.cursor).limit(size);
            let rows = self.admin.store.list(filter).await?;
            let Some(last) = rows.last().map(|r| r.id) else { break OperationState::Done };
            let moved = self.batch(&mut run, &rows, last).await?;
            run.batches += 1;
            let flow = progress(&BulkProgress {
                operation: run.report.operation,
                batch: run.batches,
                moved: run.report.moved,
                refused: run.report.refused,
                cursor: run.report.cursor,
            });
            if self.plan.canary.is_some() && !moved.is_empty() && self.op.is_some() {
                if let Some(stop) = self.watch(&rows, &moved, pacing).await? {
                    run.report.canary_stop = Some(stop);
                    break OperationState::Stopped;
                }
            }
            if flow.is_break() {
                break OperationState::Stopped;
            }
            pace(&run, pacing).await;
        };
        if let Some(op) = &self.op {
            self.admin.store.set_operation_state(op.id, state).await?;
        }
        run.report.state = state;
        Ok(run.report)
    }

    fn begin(&self) -> Run {
        let (operation, cursor, moved, refused) =
            self.op.as_ref().map_or((None, 0, 0, 0), |op| (Some(op.id), op.cursor, op.moved, op.refused));
        let report = BulkReport {
            operation,
            action: self.plan.action,
            dry_run: self.op.is_none(),
            moved,
            refused,
            moved_ids: Vec::new(),
            refusals: Vec::new(),
            state: OperationState::Running,
            canary_stop: None,
            cursor,
        };
        Run { report, batches: 0, started: tokio::time::Instant::now(), this_run: 0 }
    }

    /// How many rows the next batch lists: the canary first, then `batch`, within `max`.
    fn next_size(&self, run: &Run) -> usize {
        let size = match self.plan.canary {
            Some(canary) if run.batches == 0 => canary.max(1),
            _ => self.plan.batch.max(1),
        };
        let left = self.plan.max.map_or(u64::MAX, |max| max.saturating_sub(run.report.moved));
        size.min(usize::try_from(left).unwrap_or(usize::MAX))
    }

    /// Validates and applies (or, dry, classifies) one batch; returns the ids moved.
    async fn batch(&self, run: &mut Run, rows: &[DeadLetter], last: DlqId) -> Result<Vec<DlqId>, Error> {
        let mut invalid = Vec::new();
        let mut ids = Vec::new();
        for row in rows {
            match self.validate(row) {
                Err(message) => invalid.push(Refusal { id: row.id, why: Refused::Invalid { message } }),
                Ok(()) => ids.push(row.id),
            }
        }
        let (moved, mut refused) = match &self.op {
            None => self.classify(rows, &ids),
            Some(op) => {
                let step = OperationStep {
                    operation: op.id,
                    from: run.report.cursor,
                    to: last,
                    refused_before: invalid.len() as u64,
                };
                let batch = BatchAction {
                    action: self.plan.action,
                    ids,
                    note: self.admin.note(self.plan.reason.as_deref()),
                    max_redrives: self.plan.max_redrives,
                    step: Some(step),
                };
                let report = self.admin.store.apply(batch).await?;
                crate::observe::admin_action(self.plan.action.as_str(), report.moved.len() as u64);
                (report.moved, report.refused)
            }
        };
        refused.extend(invalid);
        refused.sort_by_key(|r| r.id);
        let r = &mut run.report;
        r.cursor = last;
        r.moved += moved.len() as u64;
        r.refused += refused.len() as u64;
        run.this_run += moved.len() as u64;
        r.moved_ids.extend(&moved);
        r.refusals.extend(refused);
        Ok(moved)
    }

    fn validate(&self, row: &DeadLetter) -> Result<(), String> {
        if self.plan.validate && self.plan.action == ActionKind::Redrive { self.admin.check(row) } else { Ok(()) }
    }

    /// A dry run's verdict on rows, by the same rule the stores apply.
    fn classify(&self, rows: &[DeadLetter], ids: &[DlqId]) -> (Vec<DlqId>, Vec<Refusal>) {
        let mut moved = Vec::new();
        let mut refused = Vec::new();
        for row in rows.iter().filter(|r| ids.contains(&r.id)) {
            let truncated = row.payload.is_truncated();
            match refusal(self.plan.action, row.status, truncated, row.redrive_count, self.plan.max_redrives) {
                Some(why) => refused.push(Refusal { id: row.id, why }),
                None => moved.push(row.id),
            }
        }
        (moved, refused)
    }

    /// Waits for the outcome of redriven rows: `Some` when the canary must stop.
    async fn watch(&self, rows: &[DeadLetter], moved: &[DlqId], pacing: Pacing) -> Result<Option<CanaryStop>, Error> {
        let before: HashMap<DlqId, &str> = rows.iter().map(|r| (r.id, r.failure.fingerprint.as_str())).collect();
        let deadline = tokio::time::Instant::now() + pacing.canary_wait;
        loop {
            let mut waiting = Vec::new();
            let mut failures = Vec::new();
            for &id in moved {
                let Some(now) = self.admin.store.get(id).await? else { continue };
                match outcome(&now) {
                    Outcome::Waiting => waiting.push(id),
                    Outcome::Succeeded => {}
                    Outcome::Failed => failures.push(CanaryFailure {
                        id,
                        status: now.status,
                        same_fingerprint: before.get(&id) == Some(&now.failure.fingerprint.as_str()),
                        fingerprint: now.failure.fingerprint,
                        reason: now.failure.reason,
                    }),
                }
            }
            // Every row's outcome before the verdict, so the report names all the failures
            // (and no row of the batch is still running when the command returns).
            if waiting.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(match (failures.is_empty(), waiting.is_empty()) {
                    (false, _) => Some(CanaryStop::Failed { failures }),
                    (true, false) => Some(CanaryStop::NoOutcome { waiting }),
                    (true, true) => None,
                });
            }
            tokio::time::sleep(pacing.poll).await;
        }
    }
}

enum Outcome {
    Waiting,
    Succeeded,
    Failed,
}

/// Where a redriven row is: not run yet, succeeded, or failed again (dead, discarded, or
/// pending after a failed retry).
fn outcome(row: &DeadLetter) -> Outcome {
    match row.status {
        Status::Succeeded => Outcome::Succeeded,
        Status::Pending if row.retry_count == 0 => Outcome::Waiting,
        Status::Processing => Outcome::Waiting,
        Status::Pending | Status::FailedPermanently | Status::Discarded => Outcome::Failed,
    }
}

/// Sleeps until this run is back under `rate` rows per second.
async fn pace(run: &Run, pacing: Pacing) {
    let Some(rate) = pacing.rate.filter(|r| *r > 0.0) else { return };
    let due = run.started + Duration::from_secs_f64(run.this_run as f64 / rate);
    tokio::time::sleep_until(due).await;
}
