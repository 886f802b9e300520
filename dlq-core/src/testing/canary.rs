//! Rows that hold a canary in every place redaction must hide it, for a test that walks an
//! operator surface (every verb of a command line, every route of a console) and proves that
//! no output shows it and no filter tells it from a wrong guess.
//!
//! [`seed`] publishes the catalog record of [`EVENT_TYPE`] (it redacts [`REDACT`], as
//! `#[dead_letter(redact = [...])]` publishes it) and parks rows whose redacted fields, error
//! reasons, chains and stack traces, audit reasons, patch values and validation errors hold
//! [`CARD`] or [`EMAIL`]; [`assert_clean`] fails when a text shows either.
//!
//! ```
//! use std::sync::Arc;
//! use dlq_core::admin::Admin;
//! use dlq_core::{MemoryStore, testing::canary};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let rows = canary::seed(store.clone()).await?;
//! let shown = Admin::new(store, "alice").show(rows.dead).await?;
//! canary::assert_clean("show", &format!("{shown:?}"));
//! # Ok::<(), dlq_core::Error>(())
//! # }).unwrap();
//! ```

use std::sync::Arc;

use serde_json::json;

use crate::admin::{Admin, BulkPlan};
use crate::catalog::EventTypeInfo;
use crate::store::NewDeadLetter;
use crate::{
    DlqId, Error, ErrorClass, ListFilter, Payload, classify::FailureInfo, record::DeadReason, store::prelude::*,
};

/// The card number the rows hold at a redacted field and quote in their texts.
pub const CARD: &str = "4111111111111111";
/// The e-mail address the rows hold at a redacted field and quote in their texts.
pub const EMAIL: &str = "canary.secret@example.com";
/// The event type of the rows.
pub const EVENT_TYPE: &str = "canary-payment";
/// The fields the type redacts.
pub const REDACT: [&str; 2] = ["/card/number", "/customer/email"];
/// The reason of every seeded row: it quotes both canaries.
pub const REASON: &str = "card 4111111111111111 declined for canary.secret@example.com";

/// The rows [`seed`] parked.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Canaries {
    /// A `FAILED_PERMANENTLY` row.
    pub dead: DlqId,
    /// A `PENDING` row.
    pub pending: DlqId,
    /// A dead row whose payload its catalog schema refuses, quoting the card number.
    pub undecodable: DlqId,
    /// A dead row patched twice, each patch's reason quoting the card number, the second
    /// writing it at a redacted field.
    pub patched: DlqId,
    /// The first patch's audit entry: undoing it is refused, listing the second.
    pub first_patch: i64,
    /// The second patch's audit entry.
    pub second_patch: i64,
    /// The failure group of the dead rows.
    pub group: String,
    /// A stored redrive operation of the dead row, not run.
    pub operation: i64,
}

/// Fails, naming `what`, when `text` shows [`CARD`] or [`EMAIL`] (or the card's last twelve
/// digits, or the address's local part).
///
/// # Panics
/// When it does.
pub fn assert_clean(what: &str, text: &str) {
    for secret in [CARD, &CARD[4..], EMAIL, "canary.secret"] {
        assert!(!text.contains(secret), "{what} shows the redacted value {secret:?}:\n{text}");
    }
}

fn failure() -> FailureInfo {
    let chain = vec![REASON.to_owned(), format!("caused by: no account for {EMAIL}")];
    let stack = format!("at charge(card = {CARD})");
    FailureInfo::new(ErrorClass::Permanent, "Declined", REASON.to_owned(), chain, Some(stack))
}

fn payload(card: serde_json::Value) -> Payload {
    Payload::Json(json!({"amount": 1250, "card": {"number": card, "exp": "12/30"}, "customer": {"email": EMAIL}}))
}

/// Publishes [`EVENT_TYPE`]'s catalog record (redacting [`REDACT`], with a JSON Schema that
/// wants the card number as a string) and parks the [`Canaries`] into `store`, patching one
/// row twice as operator `canary-seed`.
///
/// # Errors
/// The store's.
pub async fn seed(store: Arc<dyn DeadLetterStore>) -> Result<Canaries, Error> {
    let mut info = EventTypeInfo::new(EVENT_TYPE, 1, "canary-seed");
    info.redact = REDACT.iter().map(|p| (*p).to_owned()).collect();
    info.schema = Some(json!({
        "type": "object",
        "properties": {
            "amount": {"type": "integer"},
            "card": {"type": "object", "properties": {"number": {"type": "string"}, "exp": {"type": "string"}}},
            "customer": {"type": "object", "properties": {"email": {"type": "string"}}}
        },
        "required": ["amount", "card"]
    }));
    store.publish_types(vec![info]).await?;
    let dead =
        |card: serde_json::Value| NewDeadLetter::new(EVENT_TYPE, payload(card), failure()).dead(DeadReason::Permanent);
    let dead_id = store.park(dead(json!(CARD))).await?.id;
    let pending =
        NewDeadLetter::new(EVENT_TYPE, payload(json!(CARD)), failure()).retry(std::time::Duration::from_secs(3600), 5);
    let pending = store.park(pending).await?.id;
    // The schema wants a string: the validation error quotes the number.
    let undecodable = store.park(dead(json!(4_111_111_111_111_111_u64))).await?.id;
    let patched = store.park(dead(json!("5500005555555559"))).await?.id;
    let admin = Admin::new(store.clone(), "canary-seed");
    let first = json!([{"op": "replace", "path": "/amount", "value": 1300}]);
    let first_patch = admin.patch(patched, &first, &format!("amount for card {CARD}")).await?.audit_id;
    let second = json!([{"op": "replace", "path": "/card/number", "value": CARD}]);
    let second_patch =
        admin.patch(patched, &second, &format!("card {CARD} of {EMAIL} is the right one")).await?.audit_id;
    let group = store.get(dead_id).await?.ok_or(Error::NotFound(dead_id))?.failure.fingerprint;
    let plan = BulkPlan::redrive(ListFilter::default().ids([dead_id]), "canary redrive");
    let operation = admin.start(plan).await?.operation().map_or(0, |op| op.id);
    Ok(Canaries { dead: dead_id, pending, undecodable, patched, first_patch, second_patch, group, operation })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    /// The admin layer's reads and refusals, on the seeded rows: the door the command line and
    /// the console go through.
    #[tokio::test]
    async fn the_admin_layer_shows_no_canary_and_no_filter_finds_one() {
        let store = Arc::new(MemoryStore::new());
        let rows = seed(store.clone()).await.unwrap();
        let admin = Admin::new(store, "alice").with_store_catalog().await.unwrap();
        for id in [rows.dead, rows.pending, rows.undecodable, rows.patched] {
            assert_clean("show", &format!("{:?}", admin.show(id).await.unwrap()));
        }
        assert_clean("list", &format!("{:?}", admin.list(ListFilter::default()).await.unwrap()));
        let undecodable = admin.undecodable(ListFilter::default(), 100).await.unwrap();
        assert_eq!(undecodable.rows.len(), 1);
        assert_clean("undecodable", &format!("{undecodable:?}"));
        assert_clean("validation", &format!("{:?}", admin.validation(ListFilter::default(), 100).await.unwrap()));
        let refused = admin.undo(rows.first_patch, None, false).await.unwrap_err();
        assert!(refused.to_string().contains("later patch"), "{refused}");
        assert_clean("undo refusal", &refused.to_string());
        let patch = json!([{"op": "replace", "path": "/card/number", "value": "4000000000000002"}]);
        assert_clean("patch dry run", &format!("{:?}", admin.patch_dry_run(rows.dead, &patch).await.unwrap()));
        for guess in [CARD, "4111111111111112", "card 4111", "card 4112"] {
            let filter = ListFilter::default().reason_contains(guess);
            assert!(admin.list(filter.clone()).await.unwrap().rows.is_empty(), "{guess}");
            assert!(!admin.selects_any(&filter).await.unwrap(), "{guess}");
            let dry = admin.dry_run(BulkPlan::discard(filter, "x")).unwrap();
            let report = dry.run(crate::admin::Pacing::default(), |_| std::ops::ControlFlow::Continue(())).await;
            assert_eq!(report.unwrap().moved, 0, "{guess}");
        }
        let words = ListFilter::default().reason_contains("declined");
        assert_eq!(admin.list(words).await.unwrap().rows.len(), 4, "text an operator sees is found");
    }
}
