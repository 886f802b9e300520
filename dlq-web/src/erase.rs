//! Erasure by data subject in the console: `GET /erase` asks for the subject and the reason,
//! `POST /erase` shows how many rows will be deleted and asks again, `POST /erase` with `confirm=1`
//! erases through [`Admin::erase`](dlq_core::admin::Admin::erase) and shows the record. The
//! subject travels in form bodies only (never in a URL, so no access log keeps it), and no
//! page or log line shows it back after the erasure.

use axum::Form;
use axum::extract::State;
use axum::response::Response;
use maud::html;
use serde::Deserialize;

use crate::Console;
use crate::error::Failure;
use crate::pages::{Acting, render};
use crate::view::{self, Base};

/// The erase form's fields.
#[derive(Debug, Deserialize)]
pub(crate) struct EraseForm {
    #[serde(default)]
    subject: String,
    #[serde(default)]
    reason: String,
    /// `1` on the confirmation page's button.
    confirm: Option<String>,
}

/// `GET /erase`: the form (or, read-only, what it would take).
pub(crate) async fn page(State(console): State<Console>, base: Base) -> Response {
    let body = html! {
        p { "Deletes every row of one data subject (a customer, a card holder), in every status, with its attempts and audit log, for good, and keeps a record of who erased how many rows and why, without the subject. The service and this console must share the subject key (" code { "DLQ_SUBJECT_KEY" } ")." }
        @if console.options.actions {
            form method="post" action=(base.url("/erase")) {
                label { "Subject " input name="subject" required autocomplete="off" placeholder="customer-42"; }
                label { "Reason " input name="reason" required placeholder="GDPR request 118"; }
                button.danger type="submit" { "Review the erasure" }
            }
        } @else {
            p { "This console is read-only: run it with actions allowed, or use " code { "dlq erase --subject … --reason …" } "." }
        }
    };
    render(view::page(&base, "Erase a subject", None, body))
}

/// `POST /erase`: the confirmation page, or (`confirm=1`) the erasure and its record.
pub(crate) async fn erase(base: Base, Acting(admin): Acting, Form(form): Form<EraseForm>) -> Result<Response, Failure> {
    if form.subject.trim().is_empty() || form.reason.trim().is_empty() {
        return Err(Failure::bad_request("an erasure needs a subject and a reason (kept in the erasure record)"));
    }
    if form.confirm.as_deref() != Some("1") {
        let doomed = admin.erasable(&form.subject).await?;
        let body = html! {
            p.warn { strong { (doomed) } " rows are stored under this subject: each will be deleted with its attempts and audit log. This cannot be undone." }
            form method="post" action=(base.url("/erase")) {
                input type="hidden" name="subject" value=(form.subject);
                input type="hidden" name="reason" value=(form.reason);
                input type="hidden" name="confirm" value="1";
                p { "Reason: " (view::line(&form.reason)) }
                button.danger type="submit" { "Erase for good" }
            }
            p { a href=(base.url("/erase")) { "← back" } }
        };
        return Ok(render(view::page(&base, "Erase a subject: confirm", None, body)));
    }
    let erased = admin.erase(&form.subject, &form.reason).await?;
    let record = format!("erasure {} (subject {}…)", erased.id, erased.subject_prefix);
    crate::log::action("erase", &record, admin.actor(), &form.reason);
    let body = html! {
        p { "Erased " strong { (erased.rows) } " rows with " (erased.attempts) " attempts and " (erased.audit) " audit entries." }
        p { "Record " code { (erased.id) } ": subject " code { (view::line(&erased.subject_prefix)) "…" } ", by " (view::line(&erased.actor)) " at " (view::time(erased.at)) ", reason: " (view::line(&erased.reason)) }
        p { a href=(base.url("/")) { "← overview" } }
    };
    Ok(render(view::page(&base, "Erased", None, body)))
}
