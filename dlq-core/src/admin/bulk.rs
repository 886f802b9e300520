//! Bulk redrive, discard and patch: batches of one transaction each, in ascending id order,
//! with the operation and its cursor stored so that any machine can resume it; rate limit,
//! `max`, loop guard, validation, canary.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{Admin, required};
use crate::record::{DeadLetter, DlqId, ListFilter, Status};
use crate::store::{
    ActionKind, BatchAction, Operation, OperationState, OperationStep, PatchBatch, Refusal, Refused, RowEdit, refusal,
};
use crate::{CancellationToken, Error};

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
///     .canary(5)
///     .rate(20.0);
/// assert_eq!(plan.max_redrives, Some(3)); // the loop guard, unless `.force()`
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkPlan {
    /// Redrive, discard or patch.
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
    /// handler's event type (with a registry), rows the [`Validator`] refuses (for a patch:
    /// rows whose patched payload it would reject).
    pub validate: bool,
    /// Redrive this many rows first, wait for their outcome, and go on (waiting after each
    /// batch) only while they succeed.
    pub canary: Option<usize>,
    /// Rows per second at most, in any second of the run, the canary's included (`None`: as
    /// fast as the store goes); see [`rate`](Self::rate). Stored with the operation, so a
    /// resume goes at the same pace unless [`Bulk::rate`] says otherwise (absent from plans
    /// stored before it existed: they resume unpaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// A patch's RFC 6902 JSON Patch ([`BulkPlan::patch`]); `None` for the other actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<serde_json::Value>,
}

/// The most rows a dry run reads at a time (a real run moves [`BulkPlan::batch`] rows a
/// transaction; a dry run holds no lock). Reading a group of 250,000 rows 100 at a time took
/// 2.5 s at 10M rows, 1,000 at a time 1.7 s.
const DRY_RUN_PAGE: usize = 1_000;

/// The payload bytes a dry run's page may hold, judged by the page before: payloads may be
/// megabytes each, and a preview must not take more memory than the run it previews.
const DRY_RUN_BYTES: usize = 16 << 20;

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
            rate: None,
            patch: None,
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

    /// Applies the RFC 6902 JSON Patch `patch` to the payload of each row of `filter` (as
    /// given: name the statuses, e.g. a group's `FAILED_PERMANENTLY` rows), each row audited
    /// with the patch, the original payload (so [`Admin::undo`] restores it) and the
    /// operation's id, which makes a resumed run patch no row twice. A row the patch does not
    /// fit (a `test` op fails, a path is missing, it changes nothing, with
    /// [`validate`](Self::validate) the result would fail again) is refused with why
    /// ([`Refused::Unfit`]), as [`Admin::patch_preview`] shows it; so is a `PROCESSING` or
    /// `SUCCEEDED` row. What `dlq patch --group` and the console's group patch run.
    ///
    /// ```
    /// use dlq_core::admin::{Admin, BulkPlan, Pacing};
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload};
    /// use serde_json::json;
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "NoTag", "untagged".into(), vec![], None);
    /// let id = store.park(NewDeadLetter::new("payment", Payload::Json(json!({"tags": []})), failure)).await?.id;
    /// let admin = Admin::new(store.clone(), "alice");
    /// let patch = json!([{"op": "add", "path": "/tags/-", "value": "replayed"}]);
    /// let plan = BulkPlan::patch(ListFilter::default().event_type("payment"), patch, "tag them").batch(50);
    /// let report = admin.start(plan).await?.run(Pacing::default(), |_| std::ops::ControlFlow::Continue(())).await?;
    /// assert_eq!(report.moved_ids, [id]);
    /// assert_eq!(store.get(id).await?.unwrap().payload, Payload::Json(json!({"tags": ["replayed"]})));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn patch(filter: ListFilter, patch: serde_json::Value, reason: &str) -> Self {
        let reason = Some(reason.trim()).filter(|r| !r.is_empty()).map(str::to_owned);
        Self { patch: Some(patch), ..Self::new(ActionKind::Patch, filter, reason) }
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

    /// At most `rows_per_second` rows move in any one second of the run (from
    /// [`MIN_RATE`](Self::MIN_RATE) to [`MAX_RATE`](Self::MAX_RATE); checked when the plan
    /// starts or runs).
    ///
    /// The limit holds for every window of one second, not on average: at `2.0` the first
    /// second moves 2 rows, not a first batch of 100. Batches shrink to what the second has
    /// room for, and the canary is paced as any batch (a canary larger than the rate moves in
    /// several batches, each watched before the next moves). Rows are whole: a fractional
    /// rate above 1 moves its whole part per second (`2.5` moves at most 2 in any second);
    /// below 1, one row per `1 / rate` seconds. A dry run is never paced.
    ///
    /// ```
    /// use dlq_core::admin::BulkPlan;
    /// use dlq_core::ListFilter;
    ///
    /// let plan = BulkPlan::redrive(ListFilter::default(), "ledger is back").rate(50.0);
    /// assert_eq!(plan.rate, Some(50.0)); // stored with the operation: a resume keeps it
    /// ```
    #[must_use]
    pub const fn rate(mut self, rows_per_second: f64) -> Self {
        self.rate = Some(rows_per_second);
        self
    }

    /// The slowest rate: one row every 100 seconds. Slower rates would sleep for days
    /// between batches (and a rate near zero overflows every clock).
    pub const MIN_RATE: f64 = 0.01;
    /// The fastest rate a run is paced to; above it, leave the rate out.
    pub const MAX_RATE: f64 = 1_000_000.0;

    /// A rate as operators write it, `200/s` or `200`: rows per second, from
    /// [`MIN_RATE`](Self::MIN_RATE) to [`MAX_RATE`](Self::MAX_RATE) (what `dlq redrive
    /// --rate` and the console's rate field read).
    ///
    /// # Errors
    /// One line naming the text, for anything else.
    ///
    /// ```
    /// use dlq_core::admin::BulkPlan;
    /// assert_eq!(BulkPlan::parse_rate("200/s"), Ok(200.0));
    /// assert!(BulkPlan::parse_rate("0/s").is_err() && BulkPlan::parse_rate("fast").is_err());
    /// assert!(BulkPlan::parse_rate("1e-300").unwrap_err().contains("between 0.01/s and 1000000/s"));
    /// ```
    pub fn parse_rate(text: &str) -> Result<f64, String> {
        let number = text.strip_suffix("/s").unwrap_or(text);
        match number.trim().parse::<f64>() {
            Ok(rate) if rate.is_finite() && rate > 0.0 => {
                Self::check_rate(rate).map_err(|why| format!("`{text}`: {why}"))
            }
            _ => Err(format!("`{text}` is not a rate like 200/s")),
        }
    }

    fn check_rate(rate: f64) -> Result<f64, String> {
        if (Self::MIN_RATE..=Self::MAX_RATE).contains(&rate) {
            Ok(rate)
        } else {
            Err(format!("the rate must be between {}/s and {}/s", Self::MIN_RATE, Self::MAX_RATE))
        }
    }

    fn check(&self) -> Result<(), Error> {
        // Rows are numbered from 1 and a run walks ids above its cursor (0 at the start): an id
        // of 0 or less would be passed over without a word.
        if let Some(id) = self.filter.ids.iter().find(|id| **id < 1) {
            return Err(Error::Invalid(format!("{id} is not an id: ids are whole numbers from 1")));
        }
        if let Some(rate) = self.rate {
            Self::check_rate(rate).map_err(Error::Invalid)?;
        }
        if self.action == ActionKind::Discard {
            required(self.reason.as_deref().unwrap_or_default(), "discard")?;
        }
        if self.action == ActionKind::Patch {
            required(self.reason.as_deref().unwrap_or_default(), "patch")?;
            super::patch::parse(self.patch.as_ref().unwrap_or(&serde_json::Value::Null))?;
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

/// How a canary waits for its rows' outcome; given per run, not stored (the rate is the
/// plan's: [`BulkPlan::rate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// How long a canary waits for its rows' outcome before it stops.
    pub canary_wait: Duration,
    /// How often a canary looks at its rows.
    pub poll: Duration,
}

impl Pacing {
    /// The longest a canary waits for its rows' outcome.
    pub const MAX_CANARY_WAIT: Duration = Duration::from_secs(24 * 3600);

    /// The pacing is within bounds: a canary wait of at most
    /// [`MAX_CANARY_WAIT`](Self::MAX_CANARY_WAIT), a poll above zero.
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the field.
    ///
    /// ```
    /// use dlq_core::admin::Pacing;
    /// use std::time::Duration;
    /// assert!(Pacing::default().check().is_ok());
    /// assert!(Pacing { poll: Duration::ZERO, ..Pacing::default() }.check().is_err());
    /// ```
    pub fn check(&self) -> Result<(), Error> {
        if self.canary_wait > Self::MAX_CANARY_WAIT {
            return Err(Error::Invalid(format!(
                "a canary waits at most {}s for its rows",
                Self::MAX_CANARY_WAIT.as_secs()
            )));
        }
        if self.poll.is_zero() {
            return Err(Error::Invalid("a canary's poll interval must be above zero".into()));
        }
        Ok(())
    }
}

impl Default for Pacing {
    fn default() -> Self {
        Self { canary_wait: Duration::from_secs(60), poll: Duration::from_millis(200) }
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
    stop: Option<CancellationToken>,
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
        Ok(Bulk { admin: self, plan, op: Some(op), stop: None })
    }

    /// Continues a stored operation from its cursor, with its stored plan, whatever its
    /// action (the console's resume button, which names no verb).
    ///
    /// # Errors
    /// [`Error::OperationNotFound`]; [`Error::Invalid`] when it is done, or validates and
    /// this admin can validate nothing; the store's error.
    pub async fn resume(&self, operation: i64) -> Result<Bulk<'_>, Error> {
        self.resume_operation(operation, None).await
    }

    /// Continues a stored operation as [`resume`](Self::resume) does, only when its action is
    /// `expected`: `dlq redrive --resume N` must never continue a stored discard (nor
    /// `discard --resume` a redrive).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming both actions when they differ (nothing is changed); as
    /// [`resume`](Self::resume).
    ///
    /// ```
    /// use dlq_core::admin::{Admin, BulkPlan};
    /// use dlq_core::store::ActionKind;
    /// use dlq_core::{ListFilter, MemoryStore};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let admin = Admin::new(Arc::new(MemoryStore::new()), "alice");
    /// let discard = admin.start(BulkPlan::discard(ListFilter::default(), "duplicates")).await?;
    /// let id = discard.operation().unwrap().id;
    /// let err = admin.resume_as(id, ActionKind::Redrive).await.unwrap_err();
    /// assert_eq!(err.to_string(), format!("operation {id} is a discard, not a redrive: nothing resumed"));
    /// assert!(admin.resume_as(id, ActionKind::Discard).await.is_ok());
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn resume_as(&self, operation: i64, expected: ActionKind) -> Result<Bulk<'_>, Error> {
        self.resume_operation(operation, Some(expected)).await
    }

    async fn resume_operation(&self, operation: i64, expected: Option<ActionKind>) -> Result<Bulk<'_>, Error> {
        let op = self.store.operation(operation).await?.ok_or(Error::OperationNotFound(operation))?;
        if let Some(expected) = expected.filter(|e| *e != op.action) {
            return Err(Error::Invalid(format!(
                "operation {operation} is a {}, not a {}: nothing resumed",
                op.action.as_str(),
                expected.as_str()
            )));
        }
        if op.state == OperationState::Done {
            return Err(Error::Invalid(format!("operation {operation} is done: nothing to resume")));
        }
        let plan: BulkPlan = serde_json::from_value(op.spec.clone())
            .map_err(|e| Error::Invalid(format!("operation {operation} has an unreadable plan: {e}")))?;
        self.check_plan(&plan)?;
        self.store.set_operation_state(operation, OperationState::Running).await?;
        Ok(Bulk { admin: self, plan, op: Some(op), stop: None })
    }

    /// The ids of `ids` no row has, each once, in the order given: a bulk verb given a list
    /// of ids names them and does nothing (`dlq redrive 1 2 999` refuses the whole list), so
    /// that a mistyped id is never passed over while the rest move.
    ///
    /// # Errors
    /// The store's error.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "E", "bad".into(), vec![], None);
    /// let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
    /// let admin = Admin::new(store, "alice");
    /// assert_eq!(admin.unknown_ids(&[id, 999, id, 999]).await?, [999]);
    /// assert!(admin.unknown_ids(&[id]).await?.is_empty());
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn unknown_ids(&self, ids: &[DlqId]) -> Result<Vec<DlqId>, Error> {
        let mut seen = HashSet::new();
        let ids: Vec<DlqId> = ids.iter().copied().filter(|id| seen.insert(*id)).collect();
        let mut unknown = Vec::new();
        for chunk in ids.chunks(DRY_RUN_PAGE) {
            let all = ListFilter::default().ids(chunk.iter().copied()).limit(chunk.len());
            if self.store.count(all).await? == chunk.len() as u64 {
                continue;
            }
            // Some are missing: which, one count each (only on the way to a refusal).
            for &id in chunk {
                if self.store.count(ListFilter::default().ids([id]).limit(1)).await? == 0 {
                    unknown.push(id);
                }
            }
        }
        Ok(unknown)
    }

    /// What `plan` would move and refuse, changing nothing.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn dry_run(&self, plan: BulkPlan) -> Result<Bulk<'_>, Error> {
        self.check_plan(&plan)?;
        Ok(Bulk { admin: self, plan, op: None, stop: None })
    }

    /// The plan can run here: a validating plan needs a registry or a validator (a resumed
    /// one too, so that a validating redrive is never continued without its checks).
    fn check_plan(&self, plan: &BulkPlan) -> Result<(), Error> {
        plan.check()?;
        if plan.validate && plan.action != ActionKind::Discard && !self.can_validate() {
            return Err(Error::Invalid(super::NO_VALIDATION.into()));
        }
        Ok(())
    }
}

/// The state of one run.
struct Run {
    report: BulkReport,
    batches: u64,
    /// Rows this run moved.
    this_run: u64,
    /// A dry run's next page: `batch` rows first, then as many as [`DRY_RUN_BYTES`] allows.
    page: usize,
}

impl Bulk<'_> {
    /// The stored operation (`None` for a dry run).
    pub const fn operation(&self) -> Option<&Operation> {
        self.op.as_ref()
    }

    /// The plan (with this run's overrides).
    pub const fn plan(&self) -> &BulkPlan {
        &self.plan
    }

    /// This run goes at `rate` rows per second at most (`None`: unpaced) instead of the
    /// stored plan's rate ([`BulkPlan::rate`]); the stored operation keeps its own, for the
    /// next resume. Checked when the run starts.
    ///
    /// ```
    /// use dlq_core::admin::{Admin, BulkPlan};
    /// use dlq_core::{ListFilter, MemoryStore};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let admin = Admin::new(Arc::new(MemoryStore::new()), "alice");
    /// let plan = BulkPlan::redrive(ListFilter::default(), "ledger is back").rate(2.0);
    /// let id = admin.start(plan).await?.operation().unwrap().id;
    /// let resumed = admin.resume(id).await?;
    /// assert_eq!(resumed.plan().rate, Some(2.0), "a resume keeps the stored rate");
    /// assert_eq!(resumed.rate(Some(50.0)).plan().rate, Some(50.0));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn rate(mut self, rate: Option<f64>) -> Self {
        self.plan.rate = rate;
        self
    }

    /// This run moves `rows` per transaction instead of the stored plan's batch (at least 1).
    ///
    /// ```
    /// use dlq_core::admin::{Admin, BulkPlan};
    /// use dlq_core::{ListFilter, MemoryStore};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let admin = Admin::new(Arc::new(MemoryStore::new()), "alice");
    /// let id = admin.start(BulkPlan::redrive(ListFilter::default(), "fixed")).await?.operation().unwrap().id;
    /// let resumed = admin.resume(id).await?.batch(10).canary(Some(2));
    /// assert_eq!((resumed.plan().batch, resumed.plan().canary), (10, Some(2)));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn batch(mut self, rows: usize) -> Self {
        self.plan.batch = rows.max(1);
        self
    }

    /// This run redrives a canary of `rows` first (`None`: no canary) instead of the stored
    /// plan's; a discard refuses a canary when it runs (see [`batch`](Self::batch) for an
    /// example).
    #[must_use]
    pub fn canary(mut self, rows: Option<usize>) -> Self {
        self.plan.canary = rows;
        self
    }

    /// Stops the run when `token` is cancelled (Ctrl-C, a closed output): at once while it
    /// paces or waits for a canary, otherwise after the batch in flight commits. The
    /// operation is then `stopped`, resumable from its cursor.
    ///
    /// ```no_run
    /// use std::ops::ControlFlow;
    /// use dlq_core::CancellationToken;
    /// use dlq_core::admin::{Admin, BulkPlan, Pacing};
    ///
    /// # async fn demo(admin: Admin) -> Result<(), dlq_core::Error> {
    /// let stop = CancellationToken::new();
    /// let ctrl_c = stop.clone();
    /// tokio::spawn(async move { tokio::signal::ctrl_c().await.ok(); ctrl_c.cancel(); });
    /// let plan = BulkPlan::redrive(dlq_core::ListFilter::default(), "ledger fixed");
    /// let report = admin.start(plan).await?.stop_on(stop).run(Pacing::default(), |_| ControlFlow::Continue(())).await?;
    /// # let _ = report; Ok(()) }
    /// ```
    #[must_use]
    pub fn stop_on(mut self, token: CancellationToken) -> Self {
        self.stop = Some(token);
        self
    }

    fn stopped(&self) -> bool {
        self.stop.as_ref().is_some_and(CancellationToken::is_cancelled)
    }

    /// Sleeps until `due`, or until the stop token is cancelled: `false` when stopped.
    async fn sleep_until(&self, due: tokio::time::Instant) -> bool {
        match &self.stop {
            Some(token) => tokio::select! {
                () = tokio::time::sleep_until(due) => true,
                () = token.cancelled() => false,
            },
            None => {
                tokio::time::sleep_until(due).await;
                true
            }
        }
    }

    /// Runs batch after batch until every matching row is handled, `max` is reached,
    /// `progress` says stop (after the current batch: the operation stays resumable), or a
    /// canary fails.
    ///
    /// A dry run is never paced (it changes nothing, so there is nothing to slow down).
    ///
    /// # Errors
    /// [`Error::Invalid`] for a pacing out of bounds ([`Pacing::check`]), before any row
    /// moves; the store's error (the batch in flight is rolled back; resume continues there);
    /// [`Error::Conflict`] when another process runs the same operation.
    pub async fn run(
        self,
        pacing: Pacing,
        mut progress: impl FnMut(&BulkProgress) -> ControlFlow<()>,
    ) -> Result<BulkReport, Error> {
        pacing.check()?;
        self.plan.check()?;
        let mut run = self.begin();
        // A dry run changes nothing, so there is nothing to slow down.
        let mut pacer = self.plan.rate.filter(|_| self.op.is_some()).map(Pacer::new);
        let state = loop {
            if self.stopped() {
                break OperationState::Stopped;
            }
            let mut size = self.next_size(&run);
            if size == 0 {
                break OperationState::Done;
            }
            if let Some(pacer) = &mut pacer {
                let (at, room) = pacer.next_slot(tokio::time::Instant::now());
                if !self.sleep_until(at).await {
                    break OperationState::Stopped;
                }
                size = size.min(usize::try_from(room).unwrap_or(usize::MAX));
            }
            let filter = self.plan.filter.clone().oldest_first().after(run.report.cursor).limit(size);
            let super::Selected { rows, last, full } = self.admin.select(&filter).await?;
            let Some(last) = last else { break OperationState::Done };
            let moved = self.apply_batch(&mut run, &rows, last).await?;
            if self.op.is_none() {
                run.page = self.dry_page(&rows);
            }
            if let Some(pacer) = &mut pacer {
                pacer.moved(tokio::time::Instant::now(), moved.len() as u64);
            }
            run.batches += 1;
            let flow = progress(&BulkProgress {
                operation: run.report.operation,
                batch: run.batches,
                moved: run.report.moved,
                refused: run.report.refused,
                cursor: run.report.cursor,
            });
            if self.plan.canary.is_some() && !moved.is_empty() && self.op.is_some() {
                match self.watch(&rows, &moved, pacing).await? {
                    Watched::Stop(stop) => {
                        run.report.canary_stop = Some(stop);
                        break OperationState::Stopped;
                    }
                    Watched::Interrupted => break OperationState::Stopped,
                    Watched::Fine => {}
                }
            }
            if flow.is_break() || self.stopped() {
                break OperationState::Stopped;
            }
            // A short page is the end of the selection: done without waiting for another slot.
            if !full {
                break OperationState::Done;
            }
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
        Run { report, batches: 0, this_run: 0, page: self.plan.batch.max(1) }
    }

    /// How many rows the next batch lists: the canary's rows first, then `batch`, within
    /// `max` (the pacer may shrink it further). A dry run reads its pages ([`dry_page`]): it
    /// has no canary to wait on and no transaction to keep short.
    ///
    /// [`dry_page`]: Self::dry_page
    fn next_size(&self, run: &Run) -> usize {
        let size = if self.op.is_none() {
            run.page
        } else {
            match self.plan.canary.map(|c| c.max(1) as u64) {
                Some(canary) if run.this_run < canary => usize::try_from(canary - run.this_run).unwrap_or(usize::MAX),
                _ => self.plan.batch.max(1),
            }
        };
        let left = self.plan.max.map_or(u64::MAX, |max| max.saturating_sub(run.report.moved));
        size.min(usize::try_from(left).unwrap_or(usize::MAX))
    }

    /// A dry run's next page after `rows`: as many rows of their mean payload size as
    /// [`DRY_RUN_BYTES`] holds, from `batch` up to [`DRY_RUN_PAGE`] (or `batch`, if larger).
    fn dry_page(&self, rows: &[DeadLetter]) -> usize {
        let bytes: usize = rows
            .iter()
            .map(|r| r.payload.len_within(DRY_RUN_BYTES).unwrap_or(DRY_RUN_BYTES))
            .fold(0, usize::saturating_add);
        let mean = (bytes / rows.len().max(1)).max(1);
        let floor = self.plan.batch.max(1);
        (DRY_RUN_BYTES / mean).clamp(floor, floor.max(DRY_RUN_PAGE))
    }

    /// Validates and applies (or, dry, classifies) one batch; returns the ids moved.
    async fn apply_batch(&self, run: &mut Run, rows: &[DeadLetter], last: DlqId) -> Result<Vec<DlqId>, Error> {
        let (moved, mut refused) = if self.plan.action == ActionKind::Patch {
            self.patch_batch(run, rows, last).await?
        } else {
            self.move_batch(run, rows, last).await?
        };
        refused.sort_by_key(|r| r.id);
        // A refusal's message may quote the row's payload (a validation error): shown scrubbed.
        let policy = self.admin.redaction().await?;
        for refusal in &mut refused {
            let (Refused::Invalid { message } | Refused::Unfit { message }) = &mut refusal.why else { continue };
            if let Some(row) = rows.iter().find(|r| r.id == refusal.id) {
                *message = policy.scrub(&row.event_type, &[&row.payload], message).into_owned();
            }
        }
        let r = &mut run.report;
        r.cursor = last;
        r.moved += moved.len() as u64;
        r.refused += refused.len() as u64;
        run.this_run += moved.len() as u64;
        r.moved_ids.extend(&moved);
        r.refusals.extend(refused);
        Ok(moved)
    }

    /// The step of the batch that ends at `last`, for a stored operation.
    fn step(&self, run: &Run, last: DlqId, refused_before: usize) -> Option<OperationStep> {
        let op = self.op.as_ref()?;
        Some(OperationStep {
            operation: op.id,
            from: run.report.cursor,
            to: last,
            refused_before: refused_before as u64,
        })
    }

    /// A redrive's or discard's batch: the rows moved and refused.
    async fn move_batch(
        &self,
        run: &Run,
        rows: &[DeadLetter],
        last: DlqId,
    ) -> Result<(Vec<DlqId>, Vec<Refusal>), Error> {
        let mut invalid = Vec::new();
        let mut ids = Vec::new();
        for row in rows {
            match self.validate(row) {
                Err(message) => invalid.push(Refusal { id: row.id, why: Refused::Invalid { message } }),
                Ok(()) => ids.push(row.id),
            }
        }
        let (moved, mut refused) = match self.step(run, last, invalid.len()) {
            None => self.classify(rows, &ids),
            Some(step) => {
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
        Ok((moved, refused))
    }

    /// A patch's batch: each row the patch fits is written with the operation's mark in its
    /// audit entry, under its lock, only while it holds the payload the patch was computed
    /// from ([`OperatorStore::patch_rows`](crate::store::OperatorStore::patch_rows)).
    async fn patch_batch(
        &self,
        run: &Run,
        rows: &[DeadLetter],
        last: DlqId,
    ) -> Result<(Vec<DlqId>, Vec<Refusal>), Error> {
        let patch = self.plan.patch.clone().unwrap_or_default();
        let ops = super::patch::parse(&patch)?;
        let mut unfit = Vec::new();
        let mut edits = Vec::new();
        for row in rows {
            match self.admin.fit(row, &ops, self.plan.validate) {
                Ok((new, _)) => edits.push(RowEdit { id: row.id, old: row.payload.clone(), new }),
                Err(why) => unfit.push(Refusal { id: row.id, why }),
            }
        }
        let Some(step) = self.step(run, last, unfit.len()) else {
            return Ok((edits.into_iter().map(|e| e.id).collect(), unfit));
        };
        let batch = PatchBatch { rows: edits, note: self.admin.note(self.plan.reason.as_deref()), patch, step };
        let mut report = self.admin.store.patch_rows(batch).await?;
        crate::observe::admin_action(ActionKind::Patch.as_str(), report.moved.len() as u64);
        report.refused.extend(unfit);
        Ok((report.moved, report.refused))
    }

    fn validate(&self, row: &DeadLetter) -> Result<(), String> {
        if self.plan.validate && self.plan.action == ActionKind::Redrive { self.admin.check(row) } else { Ok(()) }
    }

    /// A dry run's verdict on rows, by the same rule the stores apply.
    fn classify(&self, rows: &[DeadLetter], ids: &[DlqId]) -> (Vec<DlqId>, Vec<Refusal>) {
        let mut moved = Vec::new();
        let mut refused = Vec::new();
        let ids: HashSet<DlqId> = ids.iter().copied().collect();
        for row in rows.iter().filter(|r| ids.contains(&r.id)) {
            let truncated = row.payload.is_truncated();
            match refusal(self.plan.action, row.status, truncated, row.redrive_count, self.plan.max_redrives) {
                Some(why) => refused.push(Refusal { id: row.id, why }),
                None => moved.push(row.id),
            }
        }
        (moved, refused)
    }

    /// Waits for the outcome of redriven rows: whether the canary must stop.
    async fn watch(&self, rows: &[DeadLetter], moved: &[DlqId], pacing: Pacing) -> Result<Watched, Error> {
        let before: HashMap<DlqId, &str> = rows.iter().map(|r| (r.id, r.failure.fingerprint.as_str())).collect();
        let deadline = tokio::time::Instant::now() + pacing.canary_wait.min(Pacing::MAX_CANARY_WAIT);
        loop {
            let mut waiting = Vec::new();
            let mut failures = Vec::new();
            for &id in moved {
                let Some(now) = self.admin.store.get(id).await? else { continue };
                // The reason is shown: scrubbed of the row's redacted values.
                let now = self.admin.shown_row(&*self.admin.redaction().await?, now).await?;
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
                    (false, _) => Watched::Stop(CanaryStop::Failed { failures }),
                    (true, false) => Watched::Stop(CanaryStop::NoOutcome { waiting }),
                    (true, true) => Watched::Fine,
                });
            }
            if !self.sleep_until(tokio::time::Instant::now() + pacing.poll).await {
                return Ok(Watched::Interrupted);
            }
        }
    }
}

/// What watching a canary found.
enum Watched {
    /// Every row succeeded: go on.
    Fine,
    /// Stop, for this reason.
    Stop(CanaryStop),
    /// The run was stopped while waiting ([`Bulk::stop_on`]).
    Interrupted,
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

/// Paces a run so that no window of one second sees more rows than the rate: below one
/// row per second, no window of `1 / rate` seconds sees more than one row. Batches are also
/// spread (the next starts `rows / rate` after the last), so the rows of a second do not all
/// go at its start; a batch holds at most what its window has room for.
#[derive(Debug)]
struct Pacer {
    rate: f64,
    window: Duration,
    /// Rows per window.
    allowance: u64,
    /// Rows moved, when, oldest first: those still in the window.
    recent: VecDeque<(tokio::time::Instant, u64)>,
    /// The evenly spread start of the next batch.
    next: Option<tokio::time::Instant>,
}

impl Pacer {
    /// A pacer for a rate [`BulkPlan::check`] accepted.
    fn new(rate: f64) -> Self {
        let window = if rate >= 1.0 { Duration::from_secs(1) } else { Duration::from_secs_f64(1.0 / rate) };
        // Float rounding must not make 1 row per 1/rate seconds into 0 rows.
        let allowance = ((rate * window.as_secs_f64() + 1e-9).floor() as u64).max(1);
        Self { rate, window, allowance, recent: VecDeque::new(), next: None }
    }

    /// The rows still in the window that ends at `at` (moments before it no longer count).
    fn in_window(&mut self, at: tokio::time::Instant) -> u64 {
        while self.recent.front().is_some_and(|(t, _)| *t + self.window <= at) {
            self.recent.pop_front();
        }
        self.recent.iter().map(|(_, n)| n).sum()
    }

    /// When the next batch may start (not before `now`), and how many rows it may hold then.
    fn next_slot(&mut self, now: tokio::time::Instant) -> (tokio::time::Instant, u64) {
        let mut at = self.next.map_or(now, |next| next.max(now));
        loop {
            let used = self.in_window(at);
            if used < self.allowance {
                return (at, self.allowance - used);
            }
            // Full: the slot opens when the oldest rows leave the window.
            at = self.recent.front().map_or(at, |(t, _)| *t + self.window);
        }
    }

    /// `rows` moved at `at`.
    fn moved(&mut self, at: tokio::time::Instant, rows: u64) {
        if rows == 0 {
            return;
        }
        self.recent.push_back((at, rows));
        // No spreading when the gap overflows the clock: the window alone still holds.
        self.next = Duration::try_from_secs_f64(rows as f64 / self.rate).ok().and_then(|gap| at.checked_add(gap));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::sync::Arc;

    use super::*;
    use crate::store::{ClaimRequest, Settlement};
    use crate::{
        ErrorClass, MemoryStore, Payload, classify::FailureInfo, record::DeadReason, store::NewDeadLetter,
        store::prelude::*,
    };

    /// `n` dead payments on a memory store, and an admin over it.
    async fn dead(n: u64) -> (Arc<MemoryStore>, Admin) {
        let store = Arc::new(MemoryStore::new());
        for i in 0..n {
            let failure = FailureInfo::new(ErrorClass::Permanent, "E", "down".into(), vec![], None);
            let letter = NewDeadLetter::new("payment", Payload::Json(i.into()), failure).dead(DeadReason::Permanent);
            store.park(letter).await.unwrap();
        }
        let admin = Admin::new(Arc::clone(&store) as Arc<dyn DeadLetterStore>, "alice");
        (store, admin)
    }

    /// The rows each batch moved, and when (virtual time since `started`).
    type Timeline = Vec<(Duration, u64)>;

    /// Runs `bulk` and records when each batch moved how many rows.
    async fn timed(bulk: Bulk<'_>) -> (BulkReport, Timeline) {
        let started = tokio::time::Instant::now();
        let mut last = bulk.operation().map_or(0, |op| op.moved);
        let mut timeline = Vec::new();
        let report = bulk
            .run(Pacing::default(), |p| {
                timeline.push((started.elapsed(), p.moved - last));
                last = p.moved;
                ControlFlow::Continue(())
            })
            .await
            .unwrap();
        (report, timeline)
    }

    /// The most rows any window of `window` saw (windows start at a batch).
    fn busiest(timeline: &Timeline, window: Duration) -> u64 {
        timeline
            .iter()
            .map(|(from, _)| timeline.iter().filter(|(t, _)| t >= from && *t < *from + window).map(|(_, n)| n).sum())
            .max()
            .unwrap_or(0)
    }

    async fn dead_rows(store: &MemoryStore) -> u64 {
        store.count(ListFilter::default().status(Status::FailedPermanently)).await.unwrap()
    }

    /// A dry run changes nothing: a rate does not slow it (it once slept rows/rate, so
    /// `--rate 1e-10 --dry-run` never ended).
    #[tokio::test(start_paused = true)]
    async fn a_dry_run_is_never_paced() {
        let (_, admin) = dead(3).await;
        let started = tokio::time::Instant::now();
        let plan = BulkPlan::redrive(ListFilter::default(), "try").batch(1).rate(BulkPlan::MIN_RATE);
        let report = admin.dry_run(plan).unwrap().run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
        assert_eq!(report.moved, 3);
        assert_eq!(started.elapsed(), Duration::ZERO, "no virtual time passed");
    }

    /// A dry run reads `batch` rows, then pages as large as their payloads allow: up to
    /// 1,000 small rows, and no more than 16 MiB of payloads.
    #[tokio::test]
    async fn a_dry_run_reads_pages_as_large_as_its_payloads_allow() {
        let pages = |timeline: Timeline| timeline.into_iter().map(|(_, n)| n).collect::<Vec<_>>();
        let (_, admin) = dead(2_500).await;
        let (report, timeline) = timed(admin.dry_run(BulkPlan::redrive(ListFilter::default(), "try")).unwrap()).await;
        assert_eq!((report.moved, report.moved_ids.len()), (2_500, 2_500));
        assert_eq!(pages(timeline), [100, 1_000, 1_000, 400]);

        let store = Arc::new(MemoryStore::new());
        for _ in 0..150 {
            let failure = FailureInfo::new(ErrorClass::Permanent, "E", "down".into(), vec![], None);
            let big = Payload::Json("x".repeat(256 << 10).into()); // 262,146 bytes: 63 a page
            store.park(NewDeadLetter::new("payment", big, failure).dead(DeadReason::Permanent)).await.unwrap();
        }
        let admin = Admin::new(Arc::clone(&store) as Arc<dyn DeadLetterStore>, "alice");
        let plan = BulkPlan::redrive(ListFilter::default(), "try").batch(10);
        let (report, timeline) = timed(admin.dry_run(plan).unwrap()).await;
        assert_eq!(report.moved, 150);
        assert_eq!(pages(timeline), [10, 63, 63, 14]);
    }

    /// A rate out of bounds is refused before a row moves (1e-300 rows/s once overflowed the
    /// pacing's duration and panicked after committing the first batch).
    #[tokio::test]
    async fn a_pacing_out_of_bounds_is_refused_before_a_row_moves() {
        let (store, admin) = dead(3).await;
        for rate in [1e-300, 1e-10, 1e300, f64::NAN] {
            let err = admin.start(BulkPlan::redrive(ListFilter::default(), "try").rate(rate)).await.unwrap_err();
            assert!(matches!(err, Error::Invalid(ref why) if why.contains("between")), "{rate}: {err:?}");
            // Nor can a resume's override slip one in.
            let bulk = admin.start(BulkPlan::redrive(ListFilter::default(), "try")).await.unwrap();
            let err = bulk.rate(Some(rate)).run(Pacing::default(), |_| ControlFlow::Continue(())).await;
            assert!(matches!(err, Err(Error::Invalid(ref why)) if why.contains("between")), "{rate}: {err:?}");
        }
        let long_wait = Pacing { canary_wait: Duration::from_secs(u64::MAX), ..Pacing::default() };
        let bulk = admin.start(BulkPlan::redrive(ListFilter::default(), "try").canary(1)).await.unwrap();
        assert!(bulk.run(long_wait, |_| ControlFlow::Continue(())).await.is_err());
        assert_eq!(dead_rows(&store).await, 3, "nothing moved");
    }

    /// A cancelled stop token ends a paced run at once, between batches, resumable.
    #[tokio::test(start_paused = true)]
    async fn a_stop_token_ends_a_paced_run_between_batches() {
        let (store, admin) = dead(3).await;
        let token = CancellationToken::new();
        let plan = BulkPlan::redrive(ListFilter::default(), "slowly").batch(1).rate(BulkPlan::MIN_RATE);
        let bulk = admin.start(plan).await.unwrap();
        let id = bulk.operation().unwrap().id;
        let cancel = token.clone();
        // The first batch moves at once; the run then waits 100 s (virtual) for the next.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            cancel.cancel();
        });
        let started = tokio::time::Instant::now();
        let report = bulk.stop_on(token).run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
        assert_eq!((report.moved, report.state), (1, OperationState::Stopped));
        assert_eq!(started.elapsed(), Duration::from_secs(10), "stopped when cancelled, not after the wait");
        assert_eq!(dead_rows(&store).await, 2);
        let rest = admin.resume_as(id, ActionKind::Redrive).await.unwrap().rate(None);
        let report = rest.run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
        assert_eq!((report.moved, report.state), (3, OperationState::Done));
    }

    /// `redrive --resume` of a stored discard is refused, naming both, and changes nothing.
    #[tokio::test]
    async fn a_resume_as_the_other_action_is_refused() {
        let (store, admin) = dead(2).await;
        let discard = admin.start(BulkPlan::discard(ListFilter::default(), "dupes")).await.unwrap();
        let id = discard.operation().unwrap().id;
        drop(discard);
        let err = admin.resume_as(id, ActionKind::Redrive).await.unwrap_err();
        assert_eq!(err.to_string(), format!("operation {id} is a discard, not a redrive: nothing resumed"));
        assert_eq!(dead_rows(&store).await, 2);
        let redrive = admin.start(BulkPlan::redrive(ListFilter::default(), "fixed")).await.unwrap();
        let id = redrive.operation().unwrap().id;
        drop(redrive);
        let err = admin.resume_as(id, ActionKind::Discard).await.unwrap_err();
        assert!(err.to_string().contains("is a redrive, not a discard"), "{err}");
        let bulk = admin.resume_as(id, ActionKind::Redrive).await.unwrap();
        assert_eq!(bulk.run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap().moved, 2);
    }

    /// `rate 2` moves 2 rows in the first second, not a first batch of 100: no window of one
    /// second ever sees more than the rate, and the run still keeps the rate's pace.
    #[tokio::test(start_paused = true)]
    async fn no_second_sees_more_rows_than_the_rate() {
        let (store, admin) = dead(10).await;
        let bulk = admin.start(BulkPlan::redrive(ListFilter::default(), "slowly").rate(2.0)).await.unwrap();
        let (report, timeline) = timed(bulk).await;
        assert_eq!((report.moved, report.state), (10, OperationState::Done));
        assert_eq!(timeline[0], (Duration::ZERO, 2), "the first batch shrank to the rate");
        assert_eq!(busiest(&timeline, Duration::from_secs(1)), 2, "{timeline:?}");
        assert_eq!(timeline.last().unwrap().0, Duration::from_secs(4), "and kept its pace: {timeline:?}");
        assert_eq!(dead_rows(&store).await, 0);
    }

    /// A batch that does not divide the rate (2 rows at 3/s) shrinks to what the window has
    /// room for instead of letting a second see 4 rows; a fractional rate moves whole rows
    /// (2.5/s: at most 2 in any second); below one row per second, one row per 1/rate.
    #[tokio::test(start_paused = true)]
    async fn batches_shrink_to_fit_the_rate() {
        for (rate, batch, window, most) in
            [(3.0, 2, 1.0, 3), (2.5, 100, 1.0, 2), (0.5, 100, 2.0, 1), (500.0, 100, 1.0, 500)]
        {
            let (_, admin) = dead(1_200).await;
            let plan = BulkPlan::redrive(ListFilter::default(), "paced").batch(batch).rate(rate);
            let (report, timeline) = timed(admin.start(plan).await.unwrap()).await;
            assert_eq!(report.moved, 1_200);
            let window = Duration::from_secs_f64(window);
            assert_eq!(busiest(&timeline, window), most, "{rate}/s, batch {batch}: {timeline:?}");
            // The pace up to the last batch's start: the allowance, not less.
            let (took, last) = *timeline.last().unwrap();
            let pace = (1_200 - last) as f64 / took.as_secs_f64();
            assert!(pace >= most as f64 / window.as_secs_f64() * 0.99, "{rate}/s, batch {batch}: {pace} rows/s");
        }
    }

    /// The canary is paced as any batch: a canary of 30 at 10 rows per second moves 10, waits
    /// for their outcome, and so on, never 30 in one second.
    #[tokio::test(start_paused = true)]
    async fn a_canary_is_paced_too() {
        let (store, admin) = dead(40).await;
        // Every redriven row succeeds at once, as a healthy retrier would make it.
        let retrier = {
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let request = ClaimRequest {
                    event_types: vec!["payment".into()],
                    limit: 100,
                    lease: Duration::from_secs(60),
                    owner: "test".into(),
                };
                loop {
                    let claimed = store.claim(request.clone()).await.unwrap();
                    let done = claimed.iter().map(|c| Settlement::Succeeded { lease: c.lease }).collect();
                    store.settle(done).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
        };
        let plan = BulkPlan::redrive(ListFilter::default(), "canary").canary(30).rate(10.0);
        let (report, timeline) = timed(admin.start(plan).await.unwrap()).await;
        retrier.abort();
        assert_eq!((report.moved, report.canary_stop), (40, None));
        assert!(busiest(&timeline, Duration::from_secs(1)) <= 10, "{timeline:?}");
    }

    /// A resume goes at the stored rate (it once forgot it and moved everything at once);
    /// [`Bulk::rate`] overrides it for one run, and the stored plan keeps its own.
    #[tokio::test(start_paused = true)]
    async fn a_resume_keeps_the_stored_rate_unless_overridden() {
        let (_, admin) = dead(6).await;
        let bulk = admin.start(BulkPlan::redrive(ListFilter::default(), "slowly").rate(1.0)).await.unwrap();
        let id = bulk.operation().unwrap().id;
        let first = bulk
            .run(Pacing::default(), |p| if p.moved >= 2 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) });
        assert_eq!(first.await.unwrap().moved, 2);
        let resumed = admin.resume(id).await.unwrap();
        assert_eq!(resumed.plan().rate, Some(1.0));
        let (report, timeline) = timed(resumed.batch(100)).await;
        assert_eq!((report.moved, timeline.len()), (6, 4), "one row a second: {timeline:?}");
        assert_eq!(busiest(&timeline, Duration::from_secs(1)), 1);
        let stored = admin.store().operation(id).await.unwrap().unwrap();
        assert_eq!(stored.spec["rate"], serde_json::json!(1.0));
    }

    /// A patch plan needs a reason and an RFC 6902 patch, takes no canary, and validates
    /// only where it can: each refused before an operation is stored or a row changes.
    #[tokio::test]
    async fn a_patch_plan_that_cannot_run_is_refused_before_it_is_stored() {
        let (store, admin) = dead(2).await;
        let add = serde_json::json!([{"op": "add", "path": "/tag", "value": 1}]);
        let plans = [
            (BulkPlan::patch(ListFilter::default(), add.clone(), " "), "patch needs a reason"),
            (BulkPlan::patch(ListFilter::default(), serde_json::json!({"op": "add"}), "x"), "not an RFC 6902"),
            (BulkPlan::patch(ListFilter::default(), add.clone(), "x").canary(1), "canary applies to redrives"),
            (BulkPlan::patch(ListFilter::default(), add.clone(), "x").validate(), "validation needs"),
        ];
        for (plan, want) in plans {
            let err = admin.start(plan).await.unwrap_err();
            assert!(err.to_string().contains(want), "{want}: {err}");
        }
        assert!(store.operation(1).await.unwrap().is_none(), "nothing stored");
        // The payloads are numbers: `/tag` cannot be added to them, each row is refused with why.
        let report = admin.start(BulkPlan::patch(ListFilter::default(), add, "x")).await.unwrap();
        let report = report.run(Pacing::default(), |_| ControlFlow::Continue(())).await.unwrap();
        assert_eq!((report.moved, report.refused, report.state), (0, 2, OperationState::Done));
        assert!(
            matches!(&report.refusals[0].why, Refused::Unfit { message } if message.starts_with("patch does not apply"))
        );
    }

    /// A plan naming an id of 0 or less is refused, dry or not: a run walks ids above its
    /// cursor, so such an id was passed over without a word.
    #[tokio::test]
    async fn ids_below_one_are_refused_not_passed_over() {
        let (store, admin) = dead(1).await;
        for id in [0, -1, i64::MIN] {
            let plan = BulkPlan::redrive(ListFilter::default().ids([1, id]), "x");
            let err = admin.dry_run(plan.clone()).unwrap_err();
            assert_eq!(err.to_string(), format!("{id} is not an id: ids are whole numbers from 1"));
            assert!(admin.start(plan).await.is_err());
            assert!(admin.discard(ListFilter::default().ids([id]), "x").await.is_err());
        }
        assert_eq!(dead_rows(&store).await, 1);
        assert!(store.operation(1).await.unwrap().is_none(), "nothing stored");
    }

    /// Plans stored before the rate existed still resume (unpaced).
    #[test]
    fn a_plan_stored_without_a_rate_still_reads() {
        let mut spec = serde_json::to_value(BulkPlan::redrive(ListFilter::default(), "old")).unwrap();
        assert!(spec.get("rate").is_none(), "no rate, no field");
        spec.as_object_mut().unwrap().remove("rate");
        let plan: BulkPlan = serde_json::from_value(spec).unwrap();
        assert_eq!(plan.rate, None);
    }
}
