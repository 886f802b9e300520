//! Operator actions on sealed rows ([`crate::sealed`]): a patch opens the payload in memory,
//! applies, and seals the result again under the active key, and its audit entry keeps no
//! plaintext; validation opens in memory only. Without the key ring, a sealed row's payload
//! cannot be patched (a redrive or discard needs no key).

use std::sync::Arc;

use serde_json::Value;

use super::{Admin, required};
use crate::Error;
use crate::record::{DeadLetter, DlqId, ListFilter, Payload, Status};
use crate::sealed::{self, KeyRing};
use crate::store::PatchRequest;

/// How a patched payload goes back to the store: sealed under `ring`'s active key, with the
/// fields at `clear` kept readable.
pub(super) struct Reseal {
    ring: Arc<KeyRing>,
    clear: Vec<String>,
}

impl Reseal {
    /// `payload` as the store keeps it.
    pub(super) fn seal(&self, event_type: &str, payload: &Payload) -> Result<Payload, Error> {
        let clear: Vec<&str> = self.clear.iter().map(String::as_str).collect();
        Ok(sealed::seal_payload(&self.ring, event_type, payload, &clear)?)
    }

    /// An RFC 6902 patch as the audit log keeps it for a sealed row: its operations and paths,
    /// never the values it writes.
    pub(super) fn redact(patch: Value) -> Value {
        let Value::Array(ops) = patch else { return Value::Null };
        ops.into_iter()
            .map(|mut op| {
                if let Some(value) = op.get_mut("value") {
                    *value = Value::String("[encrypted]".into());
                }
                op
            })
            .collect()
    }
}

/// What [`Admin::rekey`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct RekeyReport {
    /// Rows whose payload is now sealed under the active key, each audited as a patch.
    pub rekeyed: Vec<DlqId>,
    /// Rows already under the active key, or not sealed.
    pub current: u64,
    /// Rows left under an older key, with why: in flight (`PROCESSING`, rekeyed once
    /// settled), `SUCCEEDED` (never rewritten: purged in time), or the store refused.
    pub left: Vec<(DlqId, String)>,
}

impl Admin {
    /// Re-seals, under the ring's active key, the payload of every row `filter` selects that
    /// is sealed under another key, walking them oldest first 100 at a time (the filter's
    /// `order`, `after` and `limit` are ignored). Each row is written and audited on its own
    /// (a patch with `reason` whose diff holds only sealed payloads), so an interrupted run is
    /// finished by running it again: rows already under the active key are skipped. After a
    /// rotation, once a run leaves nothing under the old key (and its `SUCCEEDED` rows were
    /// purged), the old key can leave the ring. A row's last failure keeps the key it was
    /// sealed with until its next attempt.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::sealed::{self, KeyRing};
    /// use dlq_core::{DeadLetterStore, ErrorClass, FailureInfo, ListFilter, MemoryStore, Payload, store::NewDeadLetter};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let old = KeyRing::new("k1", [("k1", [1; 32])])?;
    /// let payload = sealed::seal_payload(&old, "payment", &Payload::Json(serde_json::json!({"pan": "4111"})), &[])?;
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let store = Arc::new(MemoryStore::new());
    /// let id = store.park(NewDeadLetter::new("payment", payload, failure)).await?.id;
    ///
    /// let rotated = KeyRing::new("k2", [("k1", [1; 32]), ("k2", [2; 32])])?;
    /// let report = Admin::new(store.clone(), "alice").keys(rotated).rekey(ListFilter::default(), "retire k1").await?;
    /// assert_eq!(report.rekeyed, [id]);
    /// assert_eq!(sealed::sealed_key(&store.get_now(id).unwrap().payload), Some("k2"));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty reason or without a key ring (nothing is written); the
    /// store's error (rows rekeyed before it stay rekeyed and audited).
    pub async fn rekey(&self, filter: ListFilter, reason: &str) -> Result<RekeyReport, Error> {
        let reason = required(reason, "rekey")?;
        let Some(ring) = self.key_ring() else {
            return Err(Error::Invalid("rekey needs the key ring: set DLQ_KEYS (and DLQ_ACTIVE_KEY)".into()));
        };
        let mut report = RekeyReport::default();
        let mut pages = super::Pages::new(filter, 100);
        while let Some(rows) = pages.next(&*self.store).await? {
            for row in rows {
                self.rekey_row(&ring, row, reason, &mut report).await?;
            }
        }
        Ok(report)
    }

    async fn rekey_row(
        &self,
        ring: &KeyRing,
        row: DeadLetter,
        reason: &str,
        report: &mut RekeyReport,
    ) -> Result<(), Error> {
        let id = row.id;
        match sealed::sealed_key(&row.payload) {
            Some(key) if key != ring.active() => {}
            _ => {
                report.current += 1;
                return Ok(());
            }
        }
        if matches!(row.status, Status::Processing | Status::Succeeded) {
            report.left.push((id, format!("{}: not rewritten", row.status)));
            return Ok(());
        }
        let clear: Vec<&str> =
            sealed::clear_fields(&row.payload).map(|c| c.keys().map(String::as_str).collect()).unwrap_or_default();
        let opened = match sealed::open_payload(ring, &row.event_type, row.payload.clone()) {
            Ok(opened) => opened,
            Err(e) => {
                report.left.push((id, e.to_string()));
                return Ok(());
            }
        };
        let payload = sealed::seal_payload(ring, &row.event_type, &opened, &clear)?;
        let request = PatchRequest { id, payload, note: self.note(Some(reason)), patch: None, undo_of: None };
        match self.store.patch(request).await {
            Ok(_) => report.rekeyed.push(id),
            Err(e @ (Error::InvalidState { .. } | Error::NotFound(_))) => report.left.push((id, e.to_string())),
            Err(other) => return Err(other),
        }
        Ok(())
    }

    /// Opens and seals sealed rows with `keys` instead of the installed ring
    /// ([`install_keys`](crate::sealed::install_keys)): patches of sealed rows, and
    /// validation of their payloads, need it.
    #[must_use]
    pub fn keys(mut self, keys: KeyRing) -> Self {
        self.keys = Some(Arc::new(keys));
        self
    }

    pub(super) fn key_ring(&self) -> Option<Arc<KeyRing>> {
        self.keys.clone().or_else(sealed::installed_keys)
    }

    /// `letter` with its payload opened, and how to seal a new payload of it, when it is
    /// sealed (or of a type registered with `encrypt = true`).
    ///
    /// # Errors
    /// [`Error::Invalid`] naming the key when there is no ring, or the ring cannot open it.
    pub(super) fn open_for_patch(&self, mut letter: DeadLetter) -> Result<(DeadLetter, Option<Reseal>), Error> {
        let registered = self.registry.as_ref().and_then(|r| r.get(&letter.event_type).ok()).and_then(|r| r.sealing);
        let key = sealed::sealed_key(&letter.payload).map(str::to_owned);
        if key.is_none() && registered.is_none() {
            return Ok((letter, None));
        }
        let what = key.as_deref().map_or_else(
            || format!("its event type `{}` is encrypted", letter.event_type),
            |key| format!("its payload is encrypted (key {key})"),
        );
        let Some(ring) = self.key_ring() else {
            return Err(Error::Invalid(format!(
                "dead letter {}: {what}, and this admin has no key ring: set DLQ_KEYS (and DLQ_ACTIVE_KEY) to patch it",
                letter.id
            )));
        };
        let mut clear: Vec<String> =
            registered.map(|s| s.clear().iter().map(|p| (*p).to_owned()).collect()).unwrap_or_default();
        if let Some(kept) = sealed::clear_fields(&letter.payload) {
            clear.extend(kept.keys().filter(|p| !clear.contains(p)).cloned().collect::<Vec<_>>());
        }
        let payload = std::mem::replace(&mut letter.payload, Payload::Json(Value::Null));
        letter.payload = sealed::open_payload(&ring, &letter.event_type, payload)
            .map_err(|e| Error::Invalid(format!("dead letter {}: {e}", letter.id)))?;
        Ok((letter, Some(Reseal { ring, clear })))
    }

    /// `payload` opened in memory for validation; `None` when it is sealed and cannot be
    /// opened here (no ring, or not its key): then it is not checked.
    pub(super) fn opened_for_check(&self, event_type: &str, payload: &Payload) -> Option<Payload> {
        if sealed::sealed_key(payload).is_none() {
            return Some(payload.clone());
        }
        sealed::open_payload(&*self.key_ring()?, event_type, payload.clone()).ok()
    }
}
