//! `GET /api/openapi.json`: the JSON API as a hand-written OpenAPI 3.1 document (a derive
//! crate would cost more build time than the dozen routes are worth).

use axum::http::header;
use axum::response::IntoResponse;

/// The document, checked to be valid JSON by a unit test.
const DOCUMENT: &str = include_str!("../assets/openapi.json");

/// `GET /api/openapi.json`.
pub(crate) async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/json")], DOCUMENT)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_document_is_json_and_names_every_api_route() {
        let doc: serde_json::Value = serde_json::from_str(super::DOCUMENT).expect("valid JSON");
        let paths = doc["paths"].as_object().expect("paths");
        for route in [
            "/api/stats",
            "/api/groups",
            "/api/events",
            "/api/events/{id}",
            "/api/events/{id}/patch",
            "/api/events/{id}/reveal",
            "/api/redrive",
            "/api/discard",
            "/api/audit/{audit_id}/undo",
        ] {
            assert!(paths.contains_key(route), "{route} is not documented");
        }
    }
}
