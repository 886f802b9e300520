//! The JSON API: the same admin calls as the pages and the CLI, the same documents as the
//! CLI's `--json` output (see `GET /api/openapi.json`).

use std::ops::ControlFlow;
use std::time::Duration;

use crate::reply::Json;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dlq_core::admin::{BulkPlan, BulkReport, Pacing, StatsReport, json};
use dlq_core::{DlqId, ListFilter, Payload, admin::FailureGroup};
use serde::Deserialize;
use serde_json::Value;

use crate::Console;
use crate::error::{ApiFailure, Failure};
use crate::extract::{JsonBody, Param};
use crate::filter;
use crate::pages::Acting;
use crate::view::Base;

type ApiResult<T> = Result<Json<T>, ApiFailure>;

/// `GET /api/stats`: as `dlq stats --json`.
pub(crate) async fn stats(State(console): State<Console>) -> ApiResult<StatsReport> {
    let stats = console.stats().await?;
    Ok(Json(StatsReport::clone(&stats)))
}

/// `GET /api/groups?…`.
pub(crate) async fn groups(
    State(console): State<Console>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Value> {
    let filter = filter::parse(&pairs)?.limit(100);
    let groups: Vec<FailureGroup> = console.admin.groups(filter).await?;
    Ok(Json(serde_json::json!({ "groups": groups })))
}

/// `GET /api/events?…`: as `dlq ls --json`.
pub(crate) async fn events(
    State(console): State<Console>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> ApiResult<Value> {
    let page = console.admin.list(filter::parse(&pairs)?).await?;
    let rows: Vec<Value> = page.rows.iter().map(json::row).collect();
    Ok(Json(serde_json::json!({ "rows": rows, "next": page.next })))
}

/// `GET /api/events/{id}`: as `dlq show --json`.
pub(crate) async fn detail(State(console): State<Console>, Param(id): Param<DlqId>) -> ApiResult<Value> {
    Ok(Json(json::detail(&console.admin.show(id).await?)))
}

/// The body of `POST /api/events/{id}/reveal`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RevealRequest {
    #[serde(default)]
    reason: String,
}

/// `POST /api/events/{id}/reveal`: as `dlq show --reveal --json`, audited; 403 unless the
/// reveal hook approves the request.
pub(crate) async fn reveal(
    State(console): State<Console>,
    Param(id): Param<DlqId>,
    parts: axum::http::request::Parts,
    JsonBody(request): JsonBody<RevealRequest>,
) -> ApiResult<Value> {
    let admin = crate::pages::revealer(&console, &parts)?;
    let detail = admin.reveal(id, &request.reason).await?;
    crate::log::action("reveal", &format!("row {id}"), admin.actor(), &request.reason);
    Ok(Json(json::detail(&detail)))
}

/// The body of `POST /api/redrive` and `POST /api/discard`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct BulkRequest {
    /// The selection (a [`ListFilter`] as JSON: `status`, `event_type`, `fingerprint`, `ids`, …).
    #[serde(default)]
    filter: ListFilter,
    /// Every row the action applies to, when the filter is empty.
    #[serde(default)]
    all: bool,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    dry_run: bool,
    canary: Option<usize>,
    canary_wait_seconds: Option<u64>,
    max: Option<u64>,
    batch: Option<usize>,
    #[serde(default)]
    force: bool,
    /// Store the operation and run it in the background: the answer (202) names it at once.
    #[serde(default)]
    background: bool,
}

impl BulkRequest {
    fn selection(&self) -> Result<ListFilter, Failure> {
        let empty = ListFilter { limit: self.filter.limit, ..ListFilter::default() };
        if self.filter == empty && !self.all {
            return Err(Failure::bad_request(
                "name the rows: a non-empty `filter` (e.g. `ids`, `fingerprint`) or `all: true`",
            ));
        }
        Ok(self.filter.clone())
    }

    fn shape(&self, mut plan: BulkPlan) -> BulkPlan {
        if let Some(batch) = self.batch {
            plan = plan.batch(batch);
        }
        if let Some(max) = self.max {
            plan = plan.max(max);
        }
        if self.force {
            plan = plan.force();
        }
        plan
    }
}

/// `POST /api/redrive`.
pub(crate) async fn redrive(
    State(console): State<Console>,
    base: Base,
    Acting(admin): Acting,
    JsonBody(request): JsonBody<BulkRequest>,
) -> Result<Response, ApiFailure> {
    let mut plan = request.shape(BulkPlan::redrive(request.selection()?, &request.reason));
    if let Some(canary) = request.canary {
        plan = plan.canary(canary);
    }
    run(&console, &base, &admin, plan, &request).await
}

/// `POST /api/discard`.
pub(crate) async fn discard(
    State(console): State<Console>,
    base: Base,
    Acting(admin): Acting,
    JsonBody(request): JsonBody<BulkRequest>,
) -> Result<Response, ApiFailure> {
    let plan = request.shape(BulkPlan::discard(request.selection()?, &request.reason));
    run(&console, &base, &admin, plan, &request).await
}

/// The report of the run, or (`background`) 202 with the stored operation and its page.
async fn run(
    console: &Console,
    base: &Base,
    admin: &dlq_core::admin::Admin,
    plan: BulkPlan,
    request: &BulkRequest,
) -> Result<Response, ApiFailure> {
    let wait = Duration::from_secs(request.canary_wait_seconds.unwrap_or(30).min(300));
    let pacing = Pacing { canary_wait: wait, ..Pacing::default() };
    if request.background && !request.dry_run {
        let id = console.start_run(admin, plan, pacing).await?;
        let link = base.url(&format!("/operations/{id}"));
        let started = serde_json::json!({ "operation": id, "state": "running", "link": link });
        return Ok((StatusCode::ACCEPTED, Json(started)).into_response());
    }
    let (verb, subject) = (plan.action.as_str(), crate::operations::selection(&plan.filter));
    let bulk = if request.dry_run { admin.dry_run(plan)? } else { admin.start(plan).await? };
    let report: BulkReport = bulk.run(pacing, |_| ControlFlow::Continue(())).await?;
    if let Some(op) = report.operation {
        let subject = format!("operation {op}: {subject}, {} rows moved, {} refused", report.moved, report.refused);
        crate::log::action(verb, &subject, admin.actor(), &request.reason);
    }
    Ok(Json(report).into_response())
}

/// The body of `POST /api/events/{id}/patch`: a JSON Patch, a whole new payload, or the exact
/// bytes of a raw one as hex.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatchRequest {
    patch: Option<Value>,
    payload: Option<Value>,
    payload_hex: Option<String>,
    #[serde(default)]
    reason: String,
}

/// `POST /api/events/{id}/patch`: as `dlq patch --json`.
pub(crate) async fn patch(
    Acting(admin): Acting,
    Param(id): Param<DlqId>,
    JsonBody(request): JsonBody<PatchRequest>,
) -> ApiResult<Value> {
    let outcome = match (&request.patch, request.payload, &request.payload_hex) {
        (Some(patch), None, None) => admin.patch(id, patch, &request.reason).await?,
        (None, Some(payload), None) => {
            let payload = Payload::from_bytes(&serde_json::to_vec(&payload).unwrap_or_default());
            admin.replace_payload(id, payload, &request.reason).await?
        }
        (None, None, Some(hex)) => {
            let payload = Payload::Raw { bytes: crate::pages::bytes_of_hex(hex)?, truncated: None };
            admin.replace_payload(id, payload, &request.reason).await?
        }
        _ => {
            let why = "give exactly one of `patch` (RFC 6902), `payload` (JSON) or `payload_hex` (raw bytes)";
            return Err(Failure::bad_request(why).into());
        }
    };
    crate::log::action(
        "patch",
        &format!("row {id} (audit entry {})", outcome.audit_id),
        admin.actor(),
        &request.reason,
    );
    Ok(Json(json::patched(&outcome)))
}

/// The body of `POST /api/audit/{audit_id}/undo`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UndoRequest {
    reason: Option<String>,
    /// Undo even though later patches of the row would be reverted with it.
    #[serde(default)]
    force: bool,
}

/// `POST /api/audit/{audit_id}/undo`.
pub(crate) async fn undo(
    Acting(admin): Acting,
    Param(audit_id): Param<i64>,
    JsonBody(request): JsonBody<UndoRequest>,
) -> ApiResult<Value> {
    let outcome = admin.undo(audit_id, request.reason.as_deref(), request.force).await?;
    let subject = format!("row {} (audit entry {audit_id})", outcome.id);
    crate::log::action("undo", &subject, admin.actor(), request.reason.as_deref().unwrap_or(""));
    Ok(Json(json::patched(&outcome)))
}
