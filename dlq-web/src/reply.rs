//! The JSON API's answers: one JSON writer for every document and error it sends.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// A JSON answer written by [`dlq_core::admin::json::to_text`]: stored text in it (a payload,
/// an error's reason) reaches a terminal that prints it (`curl …/api/events/4`) with each C1
/// control and bidi override escaped, as `dlq --json` prints it.
pub(crate) struct Json<T>(pub(crate) T);

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        let body = dlq_core::admin::json::to_text(&self.0, false);
        let mut response = body.into_response();
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        response
    }
}
