//! Failures as responses: an HTML page for the pages, `{"error": "..."}` for the API.

use crate::reply::Json;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, html};

/// Why a response is an error, kept on it (an extension) for the log of server errors.
#[derive(Debug, Clone)]
pub(crate) struct Why(pub(crate) String);

/// A request that failed: the status and one line saying why.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into() }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn respond(self, json: bool) -> Response {
        if json { ApiFailure(self).into_response() } else { self.into_response() }
    }
}

impl From<dlq_core::Error> for Failure {
    fn from(err: dlq_core::Error) -> Self {
        use dlq_core::Error as E;
        let status = match &err {
            E::NotFound(_) | E::AuditNotFound(_) | E::OperationNotFound(_) => StatusCode::NOT_FOUND,
            E::Invalid(_) | E::Parse { .. } | E::PayloadTooLarge { .. } | E::InvalidState { .. } => {
                StatusCode::BAD_REQUEST
            }
            E::Conflict { .. } => StatusCode::CONFLICT,
            E::Unsupported { .. } => StatusCode::NOT_IMPLEMENTED,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, dlq_core::admin::one_line(&err))
    }
}

/// The HTML error page (self-contained: it may be answered before the router knows its prefix).
impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let title = format!("{} {}", self.status.as_u16(), self.status.canonical_reason().unwrap_or("error"));
        let page = html! {
            (DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; meta name="viewport" content="width=device-width, initial-scale=1"; title { "dlq · " (title) } }
                body { main.error { h1 { (title) } p.message { (crate::view::text(&self.message)) } } }
            }
        };
        let mut response = (self.status, Html(page.into_string())).into_response();
        response.extensions_mut().insert(Why(self.message));
        response
    }
}

/// A failure of the JSON API: `{"error": "..."}` with the status.
#[derive(Debug)]
pub(crate) struct ApiFailure(pub(crate) Failure);

impl From<Failure> for ApiFailure {
    fn from(failure: Failure) -> Self {
        Self(failure)
    }
}

impl From<dlq_core::Error> for ApiFailure {
    fn from(err: dlq_core::Error) -> Self {
        Self(err.into())
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        let mut response = (self.0.status, Json(serde_json::json!({ "error": self.0.message }))).into_response();
        response.extensions_mut().insert(Why(self.0.message));
        response
    }
}
