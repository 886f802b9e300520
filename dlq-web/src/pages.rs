//! The HTML pages and the form actions behind their buttons.

use std::ops::ControlFlow;

use axum::Form;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use dlq_core::admin::{
    Admin, BulkPlan, BulkReport, Detail, GroupValidation, Pacing, Page, StatsReport, ValidationReport,
};
use dlq_core::{
    DeadLetter, DlqId, ListFilter, Payload, Status, adapter::CircuitState, admin::FailureGroup, store::Circuit,
};
use maud::{Markup, html};
use serde::Deserialize;

use crate::Console;
use crate::error::Failure;
use crate::extract::Param;
use crate::filter;
use crate::view::{self, Base};

type PageResult = Result<Response, Failure>;

/// The admin layer acting as this request's operator ([`crate::Options::actor`]).
pub(crate) struct Acting(pub(crate) Admin);

impl FromRequestParts<Console> for Acting {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Self::Rejection> {
        Ok(Self(console.admin_for(parts)))
    }
}

pub(crate) fn render(markup: Markup) -> Response {
    Html(markup.into_string()).into_response()
}

/// The fallback: an unknown page is a 404 page (`{"error": ...}` under `/api/`).
pub(crate) async fn not_found(uri: axum::http::Uri) -> Response {
    let api = crate::extract::is_api(uri.path());
    let what = if api {
        "no such route in the dlq console's API (see /api/openapi.json)"
    } else {
        "no such page in the dlq console"
    };
    Failure::new(StatusCode::NOT_FOUND, what).respond(api)
}

/// `GET /`.
pub(crate) async fn overview(State(console): State<Console>, base: Base) -> PageResult {
    let stats = console.stats().await?;
    let refresh = Some(console.options.refresh_seconds);
    Ok(render(view::page(&base, "Overview", refresh, overview_body(&base, &stats))))
}

fn overview_body(base: &Base, stats: &StatsReport) -> Markup {
    let list = |event_type: &str, status: Option<Status>| {
        let mut pairs = vec![("event_type", event_type.to_owned())];
        pairs.extend(status.map(|s| ("status", s.as_str().to_owned())));
        format!("{}?{}", base.url("/events"), filter::encode(&pairs))
    };
    html! {
        @for warning in &stats.warnings { p.warn { "⚠ " (view::text(warning)) } }
        section.cards {
            div.card {
                span.label { "Parked, last 5 min" } span.big { (stats.growth.last_5m) }
                span.muted { "since " (view::time(stats.growth.since_5m)) }
            }
            div.card {
                span.label { "Parked, last hour" } span.big { (stats.growth.last_1h) }
                span.muted { "since " (view::time(stats.growth.since_1h)) }
            }
            div.card { span.label { "Live retriers" } span.big { (stats.retriers.len()) } }
            div.card {
                span.label { "Saturation" }
                span.big { @match stats.saturation { Some(s) => { (format!("{:.0}%", s * 100.0)) }, None => { "no limit" } } }
            }
            @if let Some(n) = stats.sealed_unreadable {
                div.card { span.label { "Encrypted, key missing" } span.big { (n) } }
            }
        }
        @if !stats.circuits.is_empty() {
            h2 { "Circuits" }
            (circuits_table(&stats.circuits, stats.at))
        }
        h2 { "Parked over time" }
        div.chart {
            img src=(base.url("/charts/parked.svg?window=24h")) alt="rows parked per hour over the last 24 hours, by event type";
            img src=(base.url("/charts/parked.svg?window=7d")) alt="rows parked per 6 hours over the last 7 days, by event type";
        }
        h2 { "Rows by status and event type" }
        div.scroll { table {
            thead { tr { th { "event type" } @for s in Status::ALL { th.num { (s.as_str()) } } } }
            tbody {
                @for c in &stats.counts {
                    tr {
                        td { a href=(list(&c.event_type, None)) { (short(&c.event_type, TYPE_CHARS)) } }
                        @for (s, n) in [(Status::Pending, c.pending), (Status::Processing, c.processing), (Status::Succeeded, c.succeeded), (Status::FailedPermanently, c.failed_permanently), (Status::Discarded, c.discarded)] {
                            td.num { @if n > 0 { a href=(list(&c.event_type, Some(s))) { (n) } } @else { "0" } }
                        }
                    }
                }
                @if stats.counts.is_empty() { tr { td colspan="6" { "No dead letters. All quiet." } } }
            }
        } }
        h2 { "Largest failure groups" }
        (groups_table(base, &stats.groups))
        h2 { "Live retriers" }
        @if stats.retriers.is_empty() { p { "No live retrier." } }
        ul { @for r in &stats.retriers { li { code { (short(&r.owner, TYPE_CHARS)) } " on " (short(&r.host, TYPE_CHARS)) " · " (short(&r.event_types.join(", "), REASON_CHARS)) " · last seen " (view::time(r.last_seen)) } } }
        @if !stats.orphans.is_empty() {
            h2 { "Orphaned event types" }
            ul { @for o in &stats.orphans { li { code { (short(&o.event_type, TYPE_CHARS)) } ": " (o.pending) " pending, no live retrier handles it"
                @if let Some(h) = &o.expected_handler { " (expected handler " code { (short(h, TYPE_CHARS)) } ")" } } } }
        }
        @if let Some(t) = &stats.table {
            p.muted { "dlq_events: " (t.live_tuples) " live, " (t.dead_tuples) " dead tuples; autovacuum " (if t.autovacuum { "on" } else { "off" }) }
        }
        p.muted { "As of " (view::time(stats.at)) "." }
    }
}

/// The circuits that are not plainly closed: open (with the next probe), half-open, paused.
fn circuits_table(circuits: &[Circuit], at: DateTime<Utc>) -> Markup {
    html! {
        div.scroll { table {
            thead { tr { th { "event type" } th { "state" } th { "next probe" } th { "paused" } th { "reason" } } }
            tbody {
                @for c in circuits {
                    tr {
                        td { code { (short(&c.event_type, TYPE_CHARS)) } }
                        td { (c.state) }
                        td { @if let (CircuitState::Open, Some(until)) = (c.state, c.open_until) { "in " ((until - at).num_seconds().max(0)) " s" } }
                        td { @if c.paused { "by " (short(c.paused_by.as_deref().unwrap_or("?"), TYPE_CHARS)) ": " (short(c.pause_reason.as_deref().unwrap_or(""), 80)) } }
                        td.reason { (short(c.reason.as_deref().unwrap_or(""), 140)) }
                    }
                }
            }
        } }
    }
}

fn groups_table(base: &Base, groups: &[FailureGroup]) -> Markup {
    html! {
        div.scroll { table {
            thead { tr { th { "group" } th { "event type" } th { "kind" } th { "sample reason" } th.num { "rows" } th { "first seen" } th { "last seen" } } }
            tbody {
                @for g in groups {
                    tr {
                        td { a href=(base.group(&g.fingerprint, "", &[])) { code { (short(&g.fingerprint, GROUP_CHARS)) } } }
                        td { (short(&g.event_type, TYPE_CHARS)) } td { code { (short(&g.kind, TYPE_CHARS)) } } td.reason { (short(&g.sample_reason, REASON_CHARS)) }
                        td.num { (g.count) } td { (view::time(g.first_seen)) } td { (view::time(g.last_seen)) }
                    }
                }
                @if groups.is_empty() { tr { td colspan="7" { "No failure group." } } }
            }
        } }
    }
}

/// The most characters of an event type, error kind, host or handler in a table or list
/// (the row's page and the API show them whole).
const TYPE_CHARS: usize = 60;
/// The most characters of a fingerprint in a table.
const GROUP_CHARS: usize = 40;
/// The most characters of a reason or error text in a table or list.
const REASON_CHARS: usize = 140;

/// At most `max` characters of `text` on one line ([`view::line`]: control and bidi characters
/// escaped): cut by characters (never inside one), with `…` for what is left out.
pub(crate) fn short(text: &str, max: usize) -> String {
    let line = view::line(text);
    if line.chars().count() <= max {
        return line.into_owned();
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// `GET /groups`.
pub(crate) async fn groups(
    State(console): State<Console>,
    base: Base,
    Query(pairs): Query<Vec<(String, String)>>,
) -> PageResult {
    let filter = filter::parse(&pairs)?.limit(100);
    let key = format!("groups?{}", filter::encode(&filter::query(&filter)));
    let admin = console.admin.clone();
    let compute = || async move { Ok(admin.groups(filter).await?) };
    let (groups, taken) = console.snapshots.get(key, console.options.snapshot_max_age, compute).await?;
    let as_of = chrono::Utc::now() - chrono::TimeDelta::from_std(taken.elapsed()).unwrap_or_default();
    let body = html! { (groups_table(&base, &groups)) p.muted { "As of " (view::time(as_of)) "." } };
    Ok(render(view::page(&base, "Failure groups", None, body)))
}

/// The most rows of a group its page checks for how they would decode.
const DECODE_CHECK_ROWS: u64 = 500;

/// How a group's pending and dead rows would decode (the rows a redrive would hand to the
/// handler again): its `PENDING` rows, then its `FAILED_PERMANENTLY` ones, at most
/// [`DECODE_CHECK_ROWS`] in all.
async fn group_validation(admin: &Admin, fingerprint: &str) -> Result<ValidationReport, dlq_core::Error> {
    let mut report = ValidationReport::default();
    for status in [Status::Pending, Status::FailedPermanently] {
        let rows = ListFilter::default().fingerprint(fingerprint).status(status);
        let part = admin.validation(rows, DECODE_CHECK_ROWS - report.checked).await?;
        report.checked += part.checked;
        report.bounded |= part.bounded;
        report.groups.extend(part.groups);
    }
    Ok(report)
}

/// How a group's rows would decode (by the handlers, or the store's type catalog): the counts
/// of the rows checked, all of them or the first [`DECODE_CHECK_ROWS`] (counted by the same
/// walk: never against a figure read at another time), and the first error.
fn decode_counts(report: &ValidationReport) -> Markup {
    let sum = |f: fn(&GroupValidation) -> u64| report.groups.iter().map(f).sum::<u64>();
    let first = report.groups.iter().find_map(|g| g.first_error.as_ref().or(g.first_unchecked.as_ref()));
    html! {
        h2 { "Would its rows decode?" }
        p.muted {
            @if report.bounded {
                "Checked its first " (report.checked) " pending or dead rows (at most " (DECODE_CHECK_ROWS)
                " per look; it holds more)"
            } @else {
                "Checked all " (report.checked) " of its pending or dead rows"
            }
            ", by the handlers or the store's type catalog."
        }
        dl.facts {
            dt { "as they are" } dd { (sum(|g| g.as_is)) }
            dt { "after upcasting" } dd { (sum(|g| g.after_upcast)) }
            dt { "unchecked" } dd { (sum(|g| g.unchecked)) }
            dt { "not at all" } dd { (report.failing()) }
            @if let Some((id, why)) = first {
                dt { "first error" } dd { "#" (id) ": " (short(why, REASON_CHARS)) }
            }
        }
    }
}

/// `GET /groups/{fingerprint}`: the group, its rows, and (with actions) its buttons.
pub(crate) async fn group(
    State(console): State<Console>,
    base: Base,
    Param(fingerprint): Param<String>,
    Query(pairs): Query<Vec<(String, String)>>,
) -> PageResult {
    group_page(console, base, fingerprint, &pairs).await
}

/// `GET /group?group=…`: the same page, for a fingerprint no path segment can carry (empty,
/// `.`, `..`).
pub(crate) async fn group_by_query(
    State(console): State<Console>,
    base: Base,
    Query(pairs): Query<Vec<(String, String)>>,
) -> PageResult {
    let (fingerprint, pairs) = group_in_query(pairs)?;
    group_page(console, base, fingerprint, &pairs).await
}

/// The `group` (or `fingerprint`) of a query, as it is (even empty), and the other pairs.
fn group_in_query(mut pairs: Vec<(String, String)>) -> Result<(String, Vec<(String, String)>), Failure> {
    let at = pairs
        .iter()
        .position(|(k, _)| k == "group" || k == "fingerprint")
        .ok_or_else(|| Failure::bad_request("name the failure group: ?group=FINGERPRINT"))?;
    let (_, fingerprint) = pairs.remove(at);
    pairs.retain(|(k, _)| k != "group" && k != "fingerprint");
    Ok((fingerprint, pairs))
}

async fn group_page(console: Console, base: Base, fingerprint: String, pairs: &[(String, String)]) -> PageResult {
    let mut filter = filter::parse(pairs)?;
    filter.fingerprint = Some(fingerprint.clone());
    let admin = console.admin.clone();
    // A fingerprint hashes the error, not the event type: one per type that shares it.
    let (key, all) = (format!("group:{fingerprint}"), ListFilter::default().fingerprint(&fingerprint).limit(100));
    let compute = || async move { Ok(admin.groups(all).await?) };
    let (found, _) = console.snapshots.get(key, console.options.snapshot_max_age, compute).await?;
    let admin = console.admin.clone();
    let checked = fingerprint.clone();
    let compute = || async move {
        let admin = admin.with_store_catalog().await?;
        Ok(if admin.can_judge() { Some(group_validation(&admin, &checked).await?) } else { None })
    };
    let key = format!("validation:{fingerprint}");
    let (decodes, _) = console.snapshots.get(key, console.options.snapshot_max_age, compute).await?;
    let page = console.admin.list(filter.clone()).await?;
    if found.is_empty() && page.rows.is_empty() {
        return Err(Failure::new(StatusCode::NOT_FOUND, format!("no failure group `{fingerprint}`")));
    }
    let next_page = |after: DlqId| {
        let mut pairs = filter::query(&filter);
        pairs.retain(|(k, _)| *k != "group");
        pairs.push(("after", after.to_string()));
        base.group(&fingerprint, "", &pairs)
    };
    let body = html! {
        @if let Some(g) = found.first() {
            dl.facts {
                dt { "kind" } dd { code { (view::line(&g.kind)) } }
                dt { @if found.len() > 1 { "event types" } @else { "event type" } }
                dd { @for (n, t) in found.iter().enumerate() { @if n > 0 { ", " } (view::line(&t.event_type)) } }
                dt { "pending or dead rows" } dd { (found.iter().map(|t| t.count).sum::<u64>()) }
                dt { "first seen" } dd { (view::time(found.iter().map(|t| t.first_seen).min().unwrap_or(g.first_seen))) }
                dt { "last seen" } dd { (view::time(found.iter().map(|t| t.last_seen).max().unwrap_or(g.last_seen))) }
                dt { "sample reason" } dd { pre.reason { (view::text(&g.sample_reason)) } }
            }
        }
        @if let Some(report) = decodes.as_ref() { (decode_counts(report)) }
        @if console.options.actions { (group_actions(&base, &fingerprint)) }
        h2 { "Rows" }
        (rows_table(&base, &page, next_page))
    };
    Ok(render(view::page(&base, &format!("Failure group {fingerprint}"), None, body)))
}

fn group_actions(base: &Base, fingerprint: &str) -> Markup {
    html! {
        section.actions {
            form method="post" action=(base.url("/redrive")) {
                h3 { "Redrive the group" }
                input type="hidden" name="group" value=(fingerprint);
                label { "Reason " input name="reason" placeholder="what was fixed"; }
                label { "Canary rows " input name="canary" type="number" min="1" placeholder="none"; }
                label { "Rows per second " input name="rate" type="number" min="0.01" step="any" placeholder="no limit"; }
                button type="submit" { "Dry run…" }
            }
            form method="post" action=(base.url("/discard")) {
                h3 { "Discard the group" }
                input type="hidden" name="group" value=(fingerprint);
                label { "Reason " input name="reason" required placeholder="why these are dropped"; }
                button.danger type="submit" { "Dry run…" }
            }
            form method="post" action=(base.group(fingerprint, "/patch", &[])) {
                h3 { "Patch the group's dead rows" }
                label { "JSON Patch (RFC 6902) " textarea name="patch" rows="3" required placeholder=r#"[{"op":"replace","path":"/currency","value":"USD"}]"# {} }
                label { "Reason " input name="reason" required; }
                button type="submit" { "Preview…" }
            }
        }
    }
}

/// The rows of a page, with the link to the next one (`next_page` makes it from the last id).
fn rows_table(base: &Base, page: &Page, next_page: impl Fn(DlqId) -> String) -> Markup {
    let next = page.next.map(next_page);
    html! {
        div.scroll { table.rows {
            thead { tr { th.num { "id" } th { "status" } th { "event type" } th { "kind" } th { "reason" } th.num { "retries" } th.num { "redrives" } th { "parked" } } }
            tbody {
                @for row in &page.rows { (row_line(base, row)) }
                @if page.rows.is_empty() { tr { td colspan="8" { "No rows match." } } }
            }
        } }
        @if let Some(next) = next { p { a.next href=(next) { "Next page →" } } }
    }
}

fn row_line(base: &Base, row: &DeadLetter) -> Markup {
    html! {
        tr {
            td.num { a href=(base.url(&format!("/events/{}", row.id))) { (row.id) } }
            td { (view::status(row.status)) }
            td { (short(&row.event_type, TYPE_CHARS)) }
            td { code { (short(&row.failure.kind, TYPE_CHARS)) } }
            td.reason { (short(&row.failure.reason, REASON_CHARS)) }
            td.num { (row.retry_count) "/" (row.max_retries) }
            td.num { (row.redrive_count) }
            td { (view::time(row.created_at)) }
        }
    }
}

/// `GET /events`: the filter form, rows, next page.
pub(crate) async fn events(
    State(console): State<Console>,
    base: Base,
    Query(pairs): Query<Vec<(String, String)>>,
) -> PageResult {
    let filter = filter::parse(&pairs)?;
    let page = console.admin.list(filter.clone()).await?;
    let next_page = |after: DlqId| {
        let mut pairs = filter::query(&filter);
        pairs.push(("after", after.to_string()));
        format!("{}?{}", base.url("/events"), filter::encode(&pairs))
    };
    let body = html! { (filter_form(&base, &filter)) (rows_table(&base, &page, next_page)) };
    Ok(render(view::page(&base, "Events", None, body)))
}

fn filter_form(base: &Base, f: &ListFilter) -> Markup {
    let text = |v: &Option<String>| v.clone().unwrap_or_default();
    let at = |v: Option<chrono::DateTime<chrono::Utc>>| v.map(|t| t.to_rfc3339()).unwrap_or_default();
    html! {
        form.filters method="get" action=(base.url("/events")) {
            label { "Status " select name="status" {
                option value="" { "any" }
                @for s in Status::ALL { option value=(s.as_str()) selected[f.status == Some(*s)] { (s.as_str()) } }
            } }
            label { "Event type " input name="event_type" value=(text(&f.event_type)); }
            label { "Group " input name="group" value=(text(&f.fingerprint)); }
            label { "Kind " input name="kind" value=(text(&f.kind)); }
            label { "Reason contains " input name="reason" value=(text(&f.reason)); }
            label { "Since " input name="since" value=(at(f.since)) placeholder="2h or RFC 3339"; }
            label { "Until " input name="until" value=(at(f.until)); }
            label { "Order " select name="order" {
                option value="newest" { "newest first" }
                option value="oldest" selected[f.order == dlq_core::admin::Order::OldestFirst] { "oldest first" }
            } }
            button type="submit" { "Filter" }
        }
    }
}

/// `GET /events/{id}`: the row as every operator sees it, redacted fields masked; with a
/// reveal form for an operator the reveal hook approves.
pub(crate) async fn detail(
    State(console): State<Console>,
    base: Base,
    Param(id): Param<DlqId>,
    parts: Parts,
) -> PageResult {
    let detail = console.admin.show(id).await?;
    let mut body = detail_body(&base, &detail, console.options.actions);
    if console.may_reveal(&parts) {
        body = html! {
            form.inline method="post" action=(base.url(&format!("/events/{id}/reveal"))) {
                label { "Reason " input name="reason" required; }
                button type="submit" { "Reveal (audited)" }
            }
            (body)
        };
    }
    Ok(render(view::page(&base, &format!("Event {id}"), None, body)))
}

/// The form of `POST /events/{id}/reveal`.
#[derive(serde::Deserialize)]
pub(crate) struct RevealForm {
    #[serde(default)]
    reason: String,
}

/// `POST /events/{id}/reveal`: the row whole, audited, for an operator the reveal hook
/// approves (403 otherwise). Never cached.
pub(crate) async fn reveal(
    State(console): State<Console>,
    base: Base,
    Param(id): Param<DlqId>,
    parts: Parts,
    Form(form): Form<RevealForm>,
) -> PageResult {
    let admin = revealer(&console, &parts)?;
    let detail = admin.reveal(id, &form.reason).await?;
    crate::log::action("reveal", &format!("row {id}"), admin.actor(), &form.reason);
    let body = html! {
        p.summary { "Shown whole to " code { (view::line(admin.actor())) } ", audited. " a href=(base.url(&format!("/events/{id}"))) { "Back to the masked view" } }
        (detail_body(&base, &detail, false))
    };
    let mut response = render(view::page(&base, &format!("Event {id}, revealed"), None, body));
    response.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    Ok(response)
}

/// The admin acting as this request's operator, when the reveal hook approves it.
pub(crate) fn revealer(console: &Console, parts: &Parts) -> Result<Admin, Failure> {
    if !console.may_reveal(parts) {
        return Err(Failure::new(
            StatusCode::FORBIDDEN,
            "revealing rows is not allowed for this request (Options::reveal): redacted fields stay masked",
        ));
    }
    Ok(console.admin_for(parts))
}

fn detail_body(base: &Base, d: &Detail, actions: bool) -> Markup {
    let l = &d.letter;
    html! {
        dl.facts {
            dt { "status" } dd { (view::status(l.status)) @if let Some(r) = l.dead_reason { " (" (r.as_str()) ")" } }
            dt { "event type" } dd { (view::line(&l.event_type)) }
            dt { "version" } dd { (l.version) }
            dt { "handler" } dd { code { (view::line(&l.handler)) } }
            dt { "group" } dd { a href=(base.group(&l.failure.fingerprint, "", &[])) { code { (view::line(&l.failure.fingerprint)) } } }
            dt { "error" } dd { (l.failure.class.as_str()) " · " code { (view::line(&l.failure.kind)) } }
            dt { "retries" } dd { (l.retry_count) " of " (l.max_retries) "; redriven " (l.redrive_count) " times" }
            dt { "retry after" } dd { (view::time(l.retry_after)) }
            dt { "parked" } dd { (view::time(l.created_at)) " · first failed " (view::time(l.first_failed_at)) }
            dt { "source" } dd { (source(l)) }
            @if let Some(k) = &l.dedupe_key { dt { "dedupe key" } dd { code { (view::line(k)) } } }
        }
        @if actions { (detail_actions(base, l)) }
        h2 { "Reason" } pre.reason { (view::text(&l.failure.reason)) }
        h2 { "Payload" } (view::payload(&l.payload))
        h2 { "Error chain" }
        @if l.failure.chain.is_empty() { p.muted { "No sources." } }
        ol.chain { @for cause in &l.failure.chain { li { pre { (view::text(cause)) } } } }
        h2 { "Stack trace" }
        @match &l.failure.stacktrace { Some(t) => pre.trace { (view::text(&dlq_core::sealed::shown_text(t))) }, None => p.muted { "None captured." } }
        h2 { "Attempts" }
        ol.timeline { @for a in &d.attempts {
            li { (view::time(a.at)) " · attempt " (a.attempt) " · " strong { (view::line(&a.outcome)) }
                @if let Some(c) = &a.error_class { " · " (view::line(c)) } @if let Some(o) = &a.owner { " · " code { (view::line(o)) } }
                @if let Some(r) = &a.error_reason { pre.reason { (view::text(r)) } } }
        } }
        @if d.attempts.is_empty() { p.muted { "No attempt recorded." } }
        h2 { "Audit log" }
        (audit(base, d, actions))
    }
}

fn source(l: &DeadLetter) -> Markup {
    let s = &l.source;
    html! {
        @if let Some(t) = &s.topic { code { (view::line(t)) } " partition " (s.partition.unwrap_or_default()) " offset " (s.offset.unwrap_or_default()) } @else { "—" }
        @for (k, v) in &s.headers { br; code { (view::line(k)) "=" (view::line(v)) } }
        @if let Some(tc) = &s.trace_context { br; "trace " code { (view::line(tc)) } }
    }
}

fn detail_actions(base: &Base, l: &DeadLetter) -> Markup {
    // JSON with its hazards escaped is the same JSON: the editor starts from the exact payload.
    let editable = serde_json::to_string_pretty(&view::payload_value(&l.payload)).unwrap_or_default();
    let editable = view::text(&editable);
    html! {
        section.actions {
            @if l.status == Status::FailedPermanently {
                form method="post" action=(base.url("/redrive")) {
                    h3 { "Redrive" }
                    input type="hidden" name="id" value=(l.id);
                    label { "Reason " input name="reason"; }
                    button type="submit" { "Dry run…" }
                }
            }
            @if l.status != Status::Discarded && l.status != Status::Succeeded {
                form method="post" action=(base.url("/discard")) {
                    h3 { "Discard" }
                    input type="hidden" name="id" value=(l.id);
                    label { "Reason " input name="reason" required; }
                    button.danger type="submit" { "Dry run…" }
                }
            }
            @if l.status == Status::Succeeded {
                p.muted { "This row succeeded: its payload is the one its handler ran with, and stays as it is." }
            } @else if let Some(key) = dlq_core::sealed::sealed_key(&l.payload) {
                p.muted { "Its payload is encrypted (key " (key) "): it is edited where the key ring is, with " code { "dlq patch" } "." }
            } @else { form.wide method="post" action=(base.url(&format!("/events/{}/edit", l.id))) {
                @match &l.payload {
                    Payload::Json(_) => {
                        h3 { "Edit the payload" }
                        textarea name="payload" rows="10" spellcheck="false" { (editable) }
                    }
                    Payload::Raw { bytes, truncated: None } => {
                        h3 { "Edit the payload's bytes (hex)" }
                        p.muted { "Not JSON: its exact " (bytes.len()) " bytes, two hex digits each (spaces and line breaks are ignored). Saving writes exactly these bytes." }
                        textarea name="payload_hex" rows="10" spellcheck="false" { (view::hex(bytes)) }
                    }
                    Payload::Raw { bytes, truncated: Some(t) } => {
                        h3 { "Replace the payload" }
                        p.muted { "Only the first " (bytes.len()) " of its " (t.original_len) " bytes were kept: they cannot be edited as they are. Paste the whole event as JSON to replace them." }
                        textarea name="payload" rows="10" spellcheck="false" {}
                    }
                }
                label { "Reason " input name="reason" required; }
                button type="submit" { "Validate and show the diff…" }
            } }
        }
    }
}

fn audit(base: &Base, d: &Detail, actions: bool) -> Markup {
    html! {
        @if d.audit.is_empty() { p.muted { "No operator action yet." } }
        ol.audit { @for a in &d.audit {
            li {
                (view::time(a.at)) " · " strong { (view::line(&a.action)) } " by " code { (view::line(&a.actor)) }
                @if let Some(r) = &a.reason { " — " (view::text(r)) }
                details { summary { "diff" } (view::json(&a.diff)) }
                @if actions && a.action == "patch" && d.letter.status != Status::Succeeded {
                    form.inline method="post" action=(base.url(&format!("/audit/{}/undo", a.id))) {
                        button type="submit" { "Undo this patch" }
                    }
                }
            }
        } }
    }
}

/// The fields of the redrive and discard forms.
#[derive(Debug, Deserialize)]
pub(crate) struct BulkForm {
    id: Option<DlqId>,
    group: Option<String>,
    #[serde(default)]
    reason: String,
    canary: Option<String>,
    rate: Option<String>,
    confirm: Option<String>,
}

impl BulkForm {
    fn filter(&self) -> Result<ListFilter, Failure> {
        match (self.id, self.group.as_deref()) {
            (Some(id), _) => Ok(ListFilter::default().ids([id])),
            // An empty `group` names a group too: that of the rows whose fingerprint is empty,
            // whose page (`/group?group=`) sends it so.
            (None, Some(group)) => Ok(ListFilter::default().fingerprint(group)),
            (None, None) => Err(Failure::bad_request("name the rows: an `id` or a `group`")),
        }
    }

    fn canary(&self) -> Result<Option<usize>, Failure> {
        match self.canary.as_deref().map(str::trim).filter(|c| !c.is_empty()) {
            None => Ok(None),
            Some(c) => c
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .map(Some)
                .ok_or_else(|| Failure::bad_request(format!("canary=`{c}`: expected a number of rows above 0"))),
        }
    }

    fn pacing() -> Pacing {
        Pacing { canary_wait: std::time::Duration::from_secs(30), ..Pacing::default() }
    }

    fn back(&self, base: &Base) -> String {
        match (self.id, &self.group) {
            (Some(id), _) => base.url(&format!("/events/{id}")),
            (None, Some(g)) => base.group(g, "", &[]),
            (None, None) => base.url("/"),
        }
    }
}

/// A rate field (`BulkPlan::parse_rate`: `200` or `200/s`), or empty for none.
pub(crate) fn rate(field: Option<&str>) -> Result<Option<f64>, Failure> {
    match field.map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok(None),
        Some(r) => BulkPlan::parse_rate(r).map(Some).map_err(|why| Failure::bad_request(format!("rate: {why}"))),
    }
}

/// `POST /redrive`: a dry run first; `confirm=1` starts it as an operation in the background.
pub(crate) async fn redrive(
    State(console): State<Console>,
    base: Base,
    Acting(admin): Acting,
    Form(form): Form<BulkForm>,
) -> PageResult {
    let mut plan = BulkPlan::redrive(form.filter()?, &form.reason);
    if let Some(canary) = form.canary()? {
        plan = plan.canary(canary);
    }
    bulk(&console, &base, &admin, plan, &form, "/redrive").await
}

/// `POST /discard`: a dry run first; `confirm=1` starts it as an operation in the background.
pub(crate) async fn discard(
    State(console): State<Console>,
    base: Base,
    Acting(admin): Acting,
    Form(form): Form<BulkForm>,
) -> PageResult {
    let plan = BulkPlan::discard(form.filter()?, &form.reason);
    bulk(&console, &base, &admin, plan, &form, "/discard").await
}

/// A dry run's page, or (confirmed) the operation started in the background and a redirect to
/// its page.
async fn bulk(
    console: &Console,
    base: &Base,
    admin: &Admin,
    mut plan: BulkPlan,
    form: &BulkForm,
    action: &str,
) -> PageResult {
    let verb = if action == "/redrive" { "Redrive" } else { "Discard" };
    plan.rate = rate(form.rate.as_deref())?;
    if form.confirm.as_deref() == Some("1") {
        let id = console.start_run(admin, plan, BulkForm::pacing()).await?;
        return Ok(started(base, id));
    }
    // A dry run reads and counts: no rate limit, no canary wait.
    let report = admin.dry_run(plan)?.run(Pacing::default(), |_| ControlFlow::Continue(())).await?;
    let body = html! {
        (report_summary(&report))
        @if report.moved > 0 {
            form method="post" action=(base.url(action)) {
                @if let Some(id) = form.id { input type="hidden" name="id" value=(id); }
                @if let Some(g) = &form.group { input type="hidden" name="group" value=(g); }
                @if let Some(c) = &form.canary { input type="hidden" name="canary" value=(c); }
                label { "Rows per second " input name="rate" type="number" min="0.01" step="any" value=(form.rate.as_deref().unwrap_or("")) placeholder="no limit"; }
                input type="hidden" name="confirm" value="1";
                label { "Reason " input name="reason" value=(form.reason); }
                button.danger type="submit" { (verb) " " (report.moved) " rows" }
            }
        }
        p { a href=(form.back(base)) { "← back" } }
    };
    Ok(render(view::page(base, &format!("{verb}: dry run"), None, body)))
}

/// The answer to a confirmed bulk action, at once: a redirect to operation `id`'s page, with
/// the id and the link in the body too.
fn started(base: &Base, id: i64) -> Response {
    let link = base.url(&format!("/operations/{id}"));
    let body = html! { p { "Operation " code.operation { (id) } " runs in the background: " a href=(link) { "follow it" } "." } };
    let mut response = render(view::page(base, &format!("Operation {id} started"), None, body));
    *response.status_mut() = StatusCode::SEE_OTHER;
    if let Ok(location) = header::HeaderValue::from_str(&link) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    response
}

pub(crate) fn report_summary(r: &BulkReport) -> Markup {
    html! {
        p.summary {
            @if r.dry_run { "Would move " } @else { "Moved " }
            strong.moved { (r.moved) } " rows; refused " strong { (r.refused) } "."
            @if let Some(op) = r.operation { " Operation " code { (op) } " (" (format!("{:?}", r.state)) ")." }
        }
        (report_details(r))
    }
}

/// A run's refusals and canary stop.
pub(crate) fn report_details(r: &BulkReport) -> Markup {
    html! {
        @if !r.refusals.is_empty() {
            ul { @for refusal in r.refusals.iter().take(50) { li { (refusal.id) ": " (view::text(&serde_json::to_string(&refusal.why).unwrap_or_default())) } } }
        }
        @if let Some(stop) = &r.canary_stop { p.warn { "The canary stopped the redrive: " (view::text(&serde_json::to_string(stop).unwrap_or_default())) } }
    }
}

/// The fields of the payload editor: a JSON document (`payload`), or a raw payload's exact
/// bytes as hex (`payload_hex`).
#[derive(Debug, Deserialize)]
pub(crate) struct EditForm {
    payload: Option<String>,
    payload_hex: Option<String>,
    #[serde(default)]
    reason: String,
    confirm: Option<String>,
}

impl EditForm {
    /// The payload the form gives: JSON, or exactly the bytes its hex spells.
    fn payload(&self) -> Result<Payload, Failure> {
        match (&self.payload, &self.payload_hex) {
            (Some(text), None) => {
                let value: serde_json::Value = serde_json::from_str(text)
                    .map_err(|e| Failure::bad_request(format!("the payload is not valid JSON: {e}")))?;
                Ok(Payload::from_bytes(&serde_json::to_vec(&value).unwrap_or_default()))
            }
            (None, Some(hex)) => Ok(Payload::Raw { bytes: bytes_of_hex(hex)?, truncated: None }),
            (Some(_), Some(_)) => Err(Failure::bad_request("give the new payload once: `payload` or `payload_hex`")),
            (None, None) => Err(Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "missing field `payload`: the new payload, as JSON (`payload`) or as hex (`payload_hex`)",
            )),
        }
    }
}

/// The bytes a hex text spells, spaces and line breaks ignored.
pub(crate) fn bytes_of_hex(text: &str) -> Result<Vec<u8>, Failure> {
    let digits: String = text.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    dlq_core::admin::unhex(&digits).ok_or_else(|| {
        Failure::bad_request(
            "the payload's bytes are not hex: two digits 0-9 or a-f per byte (spaces and line breaks are ignored)",
        )
    })
}

/// `POST /events/{id}/edit`: validates the new payload, shows the change; `confirm=1` saves
/// it. A payload equal to the stored one is never written (the form saved as it was
/// pre-filled changes nothing, not even the audit log).
pub(crate) async fn edit(
    base: Base,
    Acting(admin): Acting,
    Param(id): Param<DlqId>,
    Form(form): Form<EditForm>,
) -> PageResult {
    let new = form.payload()?;
    let detail = admin.show(id).await?;
    let old = &detail.letter.payload;
    let event = html! { a href=(base.url(&format!("/events/{id}"))) { (id) } };
    if *old == new {
        let body = html! {
            p.summary { "The payload of event " (event) " is unchanged: nothing to save, nothing saved." }
            p { a href=(base.url(&format!("/events/{id}"))) { "← back" } }
        };
        return Ok(render(view::page(&base, &format!("Edit event {id}: unchanged"), None, body)));
    }
    if form.confirm.as_deref() == Some("1") {
        let outcome = admin.replace_payload(id, new, &form.reason).await?;
        let subject = format!("row {id} (audit entry {})", outcome.audit_id);
        crate::log::action("edit", &subject, admin.actor(), &form.reason);
        return Ok(Redirect::to(&base.url(&format!("/events/{id}"))).into_response());
    }
    let body = html! {
        p { "The payload of event " (event) " changes as follows:" }
        @match (old, &new) {
            (Payload::Json(a), Payload::Json(b)) => { (view::diff_table(&view::diff(a, b))) }
            _ => { (view::bytes_change(old, &new)) }
        }
        form method="post" action=(base.url(&format!("/events/{id}/edit"))) {
            @match &new {
                Payload::Raw { bytes, .. } => { input type="hidden" name="payload_hex" value=(dlq_core::admin::hex(bytes)); }
                Payload::Json(_) => { input type="hidden" name="payload" value=(form.payload.as_deref().unwrap_or_default()); }
            }
            input type="hidden" name="confirm" value="1";
            label { "Reason " input name="reason" value=(form.reason) required; }
            button type="submit" { "Apply" }
        }
    };
    Ok(render(view::page(&base, &format!("Edit event {id}: the diff"), None, body)))
}

/// The fields of the group patch form.
#[derive(Debug, Deserialize)]
pub(crate) struct PatchForm {
    patch: String,
    #[serde(default)]
    reason: String,
    rate: Option<String>,
    confirm: Option<String>,
}

/// `POST /groups/{fingerprint}/patch`: one JSON Patch for the group's dead rows; a preview
/// (tried on every row) first, `confirm=1` starts it as an operation in the background.
pub(crate) async fn group_patch(
    State(console): State<Console>,
    base: Base,
    Acting(admin): Acting,
    Param(fingerprint): Param<String>,
    Form(form): Form<PatchForm>,
) -> PageResult {
    patch_group(&console, base, admin, fingerprint, form).await
}

/// `POST /group/patch?group=…`: the same, for a fingerprint no path segment can carry.
pub(crate) async fn group_patch_by_query(
    State(console): State<Console>,
    base: Base,
    Acting(admin): Acting,
    Query(pairs): Query<Vec<(String, String)>>,
    Form(form): Form<PatchForm>,
) -> PageResult {
    let (fingerprint, _) = group_in_query(pairs)?;
    patch_group(&console, base, admin, fingerprint, form).await
}

/// Rows of a group patch's report listed on its page (the counts cover them all).
const PATCH_ROWS_SHOWN: usize = 50;

/// A group patch: [`Admin::patch_preview`] over the group's dead rows for the preview (which
/// rows it fits, with their changes, and which it does not, with why); once confirmed, a
/// stored operation ([`BulkPlan::patch`]) run in the background like a confirmed redrive: the
/// same operation as `dlq patch --group` (`--dry-run` for the preview).
async fn patch_group(console: &Console, base: Base, admin: Admin, fingerprint: String, form: PatchForm) -> PageResult {
    let patch: serde_json::Value = serde_json::from_str(&form.patch)
        .map_err(|e| Failure::bad_request(format!("the patch is not valid JSON: {e}")))?;
    if !patch.is_array() {
        return Err(Failure::bad_request("an RFC 6902 JSON Patch is an array of operations"));
    }
    let selection = ListFilter::default().fingerprint(&fingerprint).status(Status::FailedPermanently);
    if form.confirm.as_deref() == Some("1") {
        let mut plan = BulkPlan::patch(selection, patch, &form.reason);
        plan.rate = rate(form.rate.as_deref())?;
        let id = console.start_run(&admin, plan, Pacing::default()).await?;
        return Ok(started(&base, id));
    }
    let report = admin.patch_preview(selection, &patch, 100).await?;
    let (patched, refused) = (report.patched.len(), report.refused.len());
    let event = |id: DlqId| html! { a href=(base.url(&format!("/events/{id}"))) { (id) } };
    let body = html! {
        pre.json { (view::text(&serde_json::to_string_pretty(&patch).unwrap_or_default())) }
        p.summary {
            "This patch would apply to " strong.moved { (patched) } " of the group's " (patched + refused)
            " FAILED_PERMANENTLY rows, each audited; refused " strong { (refused) } "."
        }
        @if refused > 0 {
            h2 { "Refused" }
            div.scroll { table {
                thead { tr { th.num { "id" } th { "why" } } }
                tbody { @for r in report.refused.iter().take(PATCH_ROWS_SHOWN) { tr { td.num { (event(r.id)) } td.reason { (short(&r.reason, 200)) } } } }
            } }
        }
        @if patched > 0 {
            h2 { "Would change" }
            div.scroll { table.diff {
                thead { tr { th.num { "id" } th { "path" } th { "before" } th { "after" } } }
                tbody { @for row in report.patched.iter().take(PATCH_ROWS_SHOWN) { @for c in &row.changes { tr.chg {
                    td.num { (event(row.id)) } td { code { (short(&c.path, 80)) } }
                    td { @if let Some(v) = &c.old { code { (short(&v.to_string(), 200)) } } @else { "—" } }
                    td { @if let Some(v) = &c.new { code { (short(&v.to_string(), 200)) } } @else { "—" } }
                } } } }
            } }
        }
        @if patched.max(refused) > PATCH_ROWS_SHOWN { p.muted { "The first " (PATCH_ROWS_SHOWN) " rows of each list are shown." } }
        @if patched > 0 {
            form method="post" action=(base.group(&fingerprint, "/patch", &[])) {
                input type="hidden" name="patch" value=(form.patch);
                input type="hidden" name="confirm" value="1";
                label { "Rows per second " input name="rate" type="number" min="0.01" step="any" value=(form.rate.as_deref().unwrap_or("")) placeholder="no limit"; }
                label { "Reason " input name="reason" value=(form.reason) required; }
                button type="submit" { "Apply to " (patched) " rows" }
            }
            p.muted { "It runs in the background as a stored operation, batch by batch; rows that change before their batch are refused, not overwritten." }
        }
        p { a href=(base.group(&fingerprint, "", &[])) { "← back to the group" } }
    };
    Ok(render(view::page(&base, "Patch a failure group", None, body)))
}

/// The undo form's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct UndoForm {
    reason: Option<String>,
    /// Set (`force=on`) to undo even though later patches would be reverted with it.
    force: Option<String>,
}

/// `POST /audit/{audit_id}/undo`: restores the payload and goes back to the row.
pub(crate) async fn undo(
    base: Base,
    Acting(admin): Acting,
    Param(audit_id): Param<i64>,
    Form(form): Form<UndoForm>,
) -> PageResult {
    let outcome = admin.undo(audit_id, form.reason.as_deref(), form.force.is_some()).await?;
    let subject = format!("row {} (audit entry {audit_id})", outcome.id);
    crate::log::action("undo", &subject, admin.actor(), form.reason.as_deref().unwrap_or(""));
    let mut response = Redirect::to(&base.url(&format!("/events/{}", outcome.id))).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_group_names_the_rows_of_the_empty_fingerprint() {
        let form = |id: Option<DlqId>, group: Option<&str>| BulkForm {
            id,
            group: group.map(str::to_owned),
            reason: String::new(),
            canary: None,
            rate: None,
            confirm: None,
        };
        assert_eq!(form(None, Some("")).filter().unwrap().fingerprint.as_deref(), Some(""));
        assert_eq!(form(None, Some("a/b")).filter().unwrap().fingerprint.as_deref(), Some("a/b"));
        assert_eq!(form(Some(7), Some("")).filter().unwrap().ids, [7]);
        assert!(form(None, None).filter().unwrap_err().message.contains("name the rows"));
    }

    #[test]
    fn short_cuts_by_characters_with_an_ellipsis() {
        assert_eq!(short("payment", 60), "payment");
        assert_eq!(short("a\nb\rc", 60), "a b c");
        assert_eq!(short(&"é".repeat(10), 10), "é".repeat(10), "not cut at the limit");
        let cut = short(&"é🦀".repeat(5_000), 60);
        assert_eq!((cut.chars().count(), cut.ends_with('…')), (60, true));
        assert!(cut.starts_with("é🦀é🦀"));
        assert_eq!(short("ctl\u{1}\u{202e}x", 60), "ctl\\u0001\\u202ex", "controls and bidi escaped");
    }
}
