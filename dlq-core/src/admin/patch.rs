//! One RFC 6902 JSON Patch over many rows (a failure group): a dry run that shows what would
//! change, or a run page by page that writes and audits each row and refuses, with the
//! reason, the rows the patch does not fit.

use serde::Serialize;
use serde_json::Value;

use super::{Admin, required};
use crate::Error;
use crate::record::{DeadLetter, DlqId, ListFilter, Payload};

/// One value a patch changes, at an RFC 6901 JSON Pointer (`null` on a side where the value
/// is absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Change {
    /// Where, e.g. `/currency`.
    pub path: String,
    /// The value before (`None`: added).
    pub old: Option<Value>,
    /// The value after (`None`: removed).
    pub new: Option<Value>,
}

/// A row a patch changed (or would change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowPatch {
    /// The row.
    pub id: DlqId,
    /// The audit entry written (`None` in a dry run): [`Admin::undo`] restores the row.
    pub audit_id: Option<i64>,
    /// What changed.
    pub changes: Vec<Change>,
}

/// A row a patch was not applied to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchRefusal {
    /// The row.
    pub id: DlqId,
    /// Why: the payload is raw, the patch does not apply or changes nothing, validation
    /// refused the result, or the row changed under the patch (e.g. it is being retried).
    pub reason: String,
}

/// What [`Admin::patch_many`] did (or, dry, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PatchManyReport {
    /// Whether nothing was written.
    pub dry_run: bool,
    /// The rows patched, oldest first.
    pub patched: Vec<RowPatch>,
    /// The rows refused, oldest first.
    pub refused: Vec<PatchRefusal>,
}

impl Admin {
    /// Applies one RFC 6902 JSON Patch to every row of `filter` (typically a failure group's
    /// `FAILED_PERMANENTLY` rows), walking them oldest first, `batch` rows a page; each row
    /// is written and audited on its own (actor, reason, the patch and the original payload,
    /// so [`undo`](Self::undo) restores it). A row the patch does not fit is refused with the
    /// reason and the others go on. With `dry_run`, nothing is written: the report says what
    /// would change.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{DeadLetterStore, DeadReason, ErrorClass, FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload};
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
    /// let dry = admin.patch_many(ListFilter::default(), &patch, "trailing space", 100, true).await?;
    /// assert_eq!(dry.patched[0].changes[0].path, "/currency");
    /// assert!(dry.refused[0].reason.starts_with("patch does not apply"));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty reason or a patch that is not RFC 6902 (nothing is
    /// written); the store's error (rows written before it stay written and audited).
    pub async fn patch_many(
        &self,
        filter: ListFilter,
        patch: &Value,
        reason: &str,
        batch: usize,
        dry_run: bool,
    ) -> Result<PatchManyReport, Error> {
        let reason = required(reason, "patch")?;
        let ops = parse(patch)?;
        if self.check_patches && !self.can_validate() {
            return Err(Error::Invalid(super::NO_VALIDATION.into()));
        }
        let mut report = PatchManyReport { dry_run, patched: Vec::new(), refused: Vec::new() };
        let mut cursor = 0;
        loop {
            let page = filter.clone().oldest_first().after(cursor).limit(batch.max(1));
            let rows = self.store.list(page).await?;
            let Some(last) = rows.last().map(|r| r.id) else { break };
            for row in rows {
                let id = row.id;
                match self.patch_row(row, &ops, patch, reason, dry_run).await? {
                    Ok(done) => report.patched.push(done),
                    Err(reason) => report.refused.push(PatchRefusal { id, reason }),
                }
            }
            cursor = last;
        }
        Ok(report)
    }

    /// Patches one row of [`patch_many`](Self::patch_many): `Ok(Err(reason))` refuses it.
    async fn patch_row(
        &self,
        row: DeadLetter,
        ops: &json_patch::Patch,
        patch: &Value,
        reason: &str,
        dry_run: bool,
    ) -> Result<Result<RowPatch, String>, Error> {
        let id = row.id;
        if let Err(refused) = super::not_succeeded(&row, "patch") {
            return Ok(Err(refused.to_string()));
        }
        let (row, reseal) = match self.open_for_patch(row) {
            Ok(opened) => opened,
            Err(Error::Invalid(why)) => return Ok(Err(why)),
            Err(other) => return Err(other),
        };
        let new = match apply(&row, ops) {
            Ok(new) => new,
            Err(Error::Invalid(why)) => return Ok(Err(why)),
            Err(other) => return Err(other),
        };
        let changes = match (&row.payload, &new) {
            (Payload::Json(old), Payload::Json(new)) => changes(old, new),
            _ => Vec::new(),
        };
        if changes.is_empty() {
            return Ok(Err("the patch changes nothing".into()));
        }
        if dry_run {
            return match self.check_patched(&row, &new) {
                Ok(()) => Ok(Ok(RowPatch { id, audit_id: None, changes })),
                Err(Error::Invalid(why)) => Ok(Err(why)),
                Err(other) => Err(other),
            };
        }
        match self.write_patch(row, new, reason, Some(patch.clone()), None, reseal).await {
            Ok(outcome) => Ok(Ok(RowPatch { id, audit_id: Some(outcome.audit_id), changes })),
            Err(Error::Invalid(why)) => Ok(Err(why)),
            Err(err @ (Error::InvalidState { .. } | Error::NotFound(_) | Error::PayloadTooLarge { .. })) => {
                Ok(Err(err.to_string()))
            }
            Err(other) => Err(other),
        }
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
fn changes(old: &Value, new: &Value) -> Vec<Change> {
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
