//! One RFC 6902 JSON Patch over many rows (a failure group): the rule that says whether it
//! fits a row, and a preview that shows what it would change. The run itself is a stored
//! bulk operation ([`BulkPlan::patch`](super::BulkPlan::patch)).

use serde::Serialize;
use serde_json::Value;

use super::Admin;
use crate::Error;
use crate::record::{Change, DeadLetter, DlqId, ListFilter, Payload};
use crate::store::{ActionKind, Refused, refusal};

/// A row a patch would change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowPatch {
    /// The row.
    pub id: DlqId,
    /// What would change.
    pub changes: Vec<Change>,
    /// How the patched row would decode ([`Admin::verdict`]), when this admin can tell (it has
    /// the handlers or the store's type catalog).
    pub decodes: Option<crate::catalog::Verdict>,
}

/// A row a patch does not fit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchRefusal {
    /// The row.
    pub id: DlqId,
    /// Why: the payload is raw, the patch does not apply or changes nothing, the result is
    /// too large or validation refused it, or the row's status (`PROCESSING`, `SUCCEEDED`).
    pub reason: String,
}

/// What [`Admin::patch_preview`] found: what a stored patch operation
/// ([`BulkPlan::patch`](super::BulkPlan::patch)) would do to each row, with the changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchManyReport {
    /// The rows the patch fits, oldest first.
    pub patched: Vec<RowPatch>,
    /// The rows it does not fit, oldest first.
    pub refused: Vec<PatchRefusal>,
}

impl Admin {
    /// Tries one RFC 6902 JSON Patch on every row of `filter` (typically a failure group's
    /// `FAILED_PERMANENTLY` rows), walking them oldest first, `batch` rows a page, and writes
    /// nothing: which rows it fits, with their changes, and which it does not, with why, by
    /// the rule a stored patch operation applies ([`BulkPlan::patch`](super::BulkPlan::patch)
    /// and [`start`](Self::start), what `dlq patch --group` and the console's confirm run).
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, adapter::DeadReason, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// for payload in [serde_json::json!({"currency": "USD "}), serde_json::json!({"amount": 7})] {
    ///     let failure = FailureInfo::new(ErrorClass::Permanent, "BadCurrency", "bad".into(), vec![], None);
    ///     store.park(NewDeadLetter::new("payment", Payload::Json(payload), failure).dead(DeadReason::Permanent)).await?;
    /// }
    /// let admin = Admin::new(store, "alice");
    /// let patch = serde_json::json!([{"op": "replace", "path": "/currency", "value": "USD"}]);
    /// let dry = admin.patch_preview(ListFilter::default(), &patch, 100).await?;
    /// assert_eq!(dry.patched[0].changes[0].path, "/currency");
    /// assert!(dry.refused[0].reason.starts_with("patch does not apply"));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a patch that is not RFC 6902, or validation on an admin that can
    /// validate nothing; the store's error.
    pub async fn patch_preview(
        &self,
        filter: ListFilter,
        patch: &Value,
        batch: usize,
    ) -> Result<PatchManyReport, Error> {
        let ops = parse(patch)?;
        if self.check_patches && !self.can_validate() {
            return Err(Error::Invalid(super::NO_VALIDATION.into()));
        }
        let mut report = PatchManyReport { patched: Vec::new(), refused: Vec::new() };
        let policy = self.redaction().await?;
        let mut pages = super::Pages::new(filter, batch);
        while let Some(rows) = pages.next(self).await? {
            for row in &rows {
                match self.fit(row, &ops, self.check_patches) {
                    Ok((new, mut changes)) => {
                        let shown =
                            |why: String| policy.scrub(&row.event_type, &[&row.payload, &new], &why).into_owned();
                        let patched = DeadLetter { payload: new.clone(), ..row.clone() };
                        let decodes = self.can_judge().then(|| self.verdict(&patched).map_text(shown));
                        policy.changes(&row.event_type, &mut changes);
                        report.patched.push(RowPatch { id: row.id, changes, decodes });
                    }
                    Err(why) => {
                        let reason = policy.scrub(&row.event_type, &[&row.payload], &why.to_string()).into_owned();
                        report.refused.push(PatchRefusal { id: row.id, reason });
                    }
                }
            }
        }
        Ok(report)
    }

    /// What `ops` makes of `row`'s payload, and the changes, or why the patch does not fit
    /// it: the rule of a stored patch operation and of its preview.
    pub(super) fn fit(
        &self,
        row: &DeadLetter,
        ops: &json_patch::Patch,
        validate: bool,
    ) -> Result<(Payload, Vec<Change>), Refused> {
        if let Some(why) = refusal(ActionKind::Patch, row.status, false, 0, None) {
            return Err(why);
        }
        if let Some(key) = crate::sealed::sealed_key(&row.payload) {
            // A group patch writes the payload it computes here: it never opens a sealed row.
            let message = format!(
                "dead letter {} is encrypted (key {key}): a group patch does not open it; patch it on its own with the key ring (`dlq patch {}`)",
                row.id, row.id
            );
            return Err(Refused::Unfit { message });
        }
        let unfit = |err: Error| Refused::Unfit {
            message: match err {
                Error::Invalid(why) => why,
                other => other.to_string(),
            },
        };
        let new = apply(row, ops).map_err(unfit)?;
        let changes = match (&row.payload, &new) {
            (Payload::Json(old), Payload::Json(new)) => changes(old, new),
            _ => Vec::new(),
        };
        if changes.is_empty() {
            return Err(Refused::Unfit { message: "the patch changes nothing".into() });
        }
        new.check_fits(self.store.max_payload_bytes()).map_err(unfit)?;
        self.check_new(row, &new, validate).map_err(unfit)?;
        Ok((new, changes))
    }
}

/// The RFC 6902 patch in `patch`.
pub(super) fn parse(patch: &Value) -> Result<json_patch::Patch, Error> {
    serde_json::from_value(patch.clone()).map_err(|e| Error::Invalid(format!("not an RFC 6902 JSON Patch: {e}")))
}

/// `row`'s payload with `ops` applied.
pub(super) fn apply(row: &DeadLetter, ops: &json_patch::Patch) -> Result<Payload, Error> {
    let Payload::Json(doc) = &row.payload else {
        return Err(Error::Invalid(format!(
            "dead letter {} has a raw (non-JSON) payload: a JSON Patch cannot apply; replace it whole instead",
            row.id
        )));
    };
    let mut doc = doc.clone();
    json_patch::patch(&mut doc, ops).map_err(|e| Error::Invalid(format!("patch does not apply: {e}")))?;
    Ok(Payload::Json(doc))
}

/// The values that differ between `old` and `new`, by JSON Pointer, in document order.
pub(super) fn changes(old: &Value, new: &Value) -> Vec<Change> {
    let mut out = Vec::new();
    diff(old, new, &mut String::new(), &mut out);
    out
}

fn diff(old: &Value, new: &Value, path: &mut String, out: &mut Vec<Change>) {
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k)));
            for key in keys {
                let len = path.len();
                path.push('/');
                path.push_str(&key.replace('~', "~0").replace('/', "~1"));
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => diff(x, y, path, out),
                    (x, y) => out.push(Change { path: path.clone(), old: x.cloned(), new: y.cloned() }),
                }
                path.truncate(len);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                let len = path.len();
                path.push_str(&format!("/{i}"));
                diff(x, y, path, out);
                path.truncate(len);
            }
        }
        _ if old == new => {}
        _ => out.push(Change { path: path.clone(), old: Some(old.clone()), new: Some(new.clone()) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_name_each_value_by_pointer() {
        let old = json!({"currency": "USD ", "lines": [1, 2], "a/b": 1, "gone": true});
        let new = json!({"currency": "USD", "lines": [1, 3], "a/b": 1, "added": null});
        let mut paths: Vec<_> = changes(&old, &new).into_iter().map(|c| (c.path, c.old, c.new)).collect();
        paths.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            paths,
            vec![
                ("/added".into(), None, Some(json!(null))),
                ("/currency".into(), Some(json!("USD ")), Some(json!("USD"))),
                ("/gone".into(), Some(json!(true)), None),
                ("/lines/1".into(), Some(json!(2)), Some(json!(3))),
            ]
        );
        assert_eq!(changes(&json!([1]), &json!([1, 2]))[0].path, "");
        assert!(changes(&old, &old).is_empty());
    }
}
