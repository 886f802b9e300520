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
    /// The failure text the payload was sealed with (at the park): it goes with the new one.
    failure: Vec<u8>,
    /// The payload as the store kept it before (sealed): what a patch's outcome shows of it.
    pub(super) stored: Payload,
}

impl Reseal {
    /// `payload` as the store keeps it.
    pub(super) fn seal(&self, event_type: &str, payload: &Payload) -> Result<Payload, Error> {
        let clear: Vec<&str> = self.clear.iter().map(String::as_str).collect();
        Ok(sealed::seal_parts(&self.ring, event_type, payload, &self.failure, &clear)?)
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
    /// Re-seals, under the ring's active key and in the current envelope, the payload of every
    /// row `filter` selects that is sealed under another key or an older envelope, walking them
    /// oldest first 100 at a time (the filter's `order`, `after` and `limit` are ignored). The
    /// failure text sealed with a payload at the park moves with it.
    ///
    /// It is resumable without stored progress: each row is written and audited on its own (a
    /// patch with `reason` whose diff holds only sealed payloads), and whether a row still needs
    /// it is read from the row itself (its envelope names its key), so running it again after
    /// an interruption (a crash, a store that went down: the error is returned) skips every row
    /// already under the active key and rewrites each of the others once. After a rotation,
    /// once a run leaves nothing under the old key (and its `SUCCEEDED` rows were purged), the
    /// old key can leave the ring. A failure a retry wrote keeps the key it was sealed with
    /// until the row's next attempt.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::sealed::{self, KeyRing};
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, Payload, store::NewDeadLetter};
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
        while let Some(rows) = pages.next(self).await? {
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
        if !sealed::needs_reseal(ring, &row.payload) {
            report.current += 1;
            return Ok(());
        }
        if matches!(row.status, Status::Processing | Status::Succeeded) {
            report.left.push((id, format!("{}: not rewritten", row.status)));
            return Ok(());
        }
        // Sealed again as it is: its payload, the failure text sealed with it, its fields in clear.
        let payload = match sealed::reseal(ring, &row.event_type, &row.payload) {
            Ok(Some(payload)) => payload,
            Ok(None) => {
                report.current += 1;
                return Ok(());
            }
            Err(e) => {
                report.left.push((id, e.to_string()));
                return Ok(());
            }
        };
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
        let stored = letter.payload.clone();
        let opened = sealed::open_parts(&ring, &letter.event_type, &letter.payload)
            .map_err(|e| Error::Invalid(format!("dead letter {}: {e}", letter.id)))?;
        let failure = match opened {
            Some((payload, failure)) => {
                letter.payload = payload;
                failure
            }
            None => Vec::new(),
        };
        Ok((letter, Some(Reseal { ring, clear, failure, stored })))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;
    use crate::admin::RetrierHeartbeat;
    use crate::record::{Claimed, Settlement};
    use crate::retrier::tests::{delegate, delegate_parts};
    use crate::store::{ClaimRequest, NewDeadLetter, prelude::*};
    use crate::testing::conformance::{SEALED_MARKER, sealed_letter};
    use crate::{DlqId, MemoryStore};

    /// A store that goes down (its patches fail) after `.1` more patches.
    struct GoesDown(MemoryStore, AtomicUsize);

    delegate_parts!(GoesDown: queue, reads, fleet, privacy);

    impl crate::store::OperatorStore for GoesDown {
        delegate_parts!(@operator_but_patch);

        fn patch(&self, r: PatchRequest) -> crate::store::BoxFuture<'_, crate::store::StoreResult<i64>> {
            if self.1.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_err() {
                return Box::pin(async { Err(Error::Store("connection refused".into())) });
            }
            self.0.patch(r)
        }
    }

    #[tokio::test]
    async fn an_interrupted_rekey_run_again_rewrites_every_row_once() {
        let k1 = KeyRing::new("k1", [("k1", [1; 32])]).unwrap();
        let rotated = KeyRing::new("k2", [("k1", [1; 32]), ("k2", [2; 32])]).unwrap();
        let store = Arc::new(GoesDown(MemoryStore::new(), AtomicUsize::new(130)));
        let letters: Vec<NewDeadLetter> = (0..250).map(|n| sealed_letter(&k1, "payment", n)).collect();
        let ids: Vec<DlqId> = store.park_many(letters).await.unwrap().into_iter().map(|p| p.id).collect();
        let admin = Admin::new(store.clone(), "alice").keys(rotated);

        // The store goes down mid-run, in the second page: the error is reported.
        let err = admin.rekey(ListFilter::default(), "retire k1").await.unwrap_err();
        assert!(err.to_string().contains("connection refused"), "{err}");
        let under = |key: &str| {
            let rows = store.0.snapshot();
            rows.iter().filter(|r| sealed::sealed_key(&r.payload) == Some(key)).count()
        };
        assert_eq!((under("k2"), under("k1")), (130, 120), "rows done stay done");

        // Run again once it is back: it skips the rows done and finishes the others.
        store.1.store(usize::MAX, Ordering::SeqCst);
        let report = admin.rekey(ListFilter::default(), "retire k1").await.unwrap();
        assert_eq!((report.rekeyed.len(), report.current, report.left.len()), (120, 130, 0));
        assert_eq!(under("k2"), 250);
        let only_k2 = KeyRing::new("k2", [("k2", [2; 32])]).unwrap();
        for id in ids {
            let audit = store.audit(id).await.unwrap();
            let rekeys = audit.iter().filter(|a| a.reason.as_deref() == Some("retire k1")).count();
            assert_eq!(rekeys, 1, "row {id} rewritten once: {audit:?}");
            let row = store.get(id).await.unwrap().unwrap();
            let (payload, failure) = sealed::open_letter(&only_k2, "payment", row.payload, row.failure).unwrap();
            assert!(String::from_utf8(payload.to_bytes()).unwrap().contains(SEALED_MARKER));
            assert_eq!(failure.stacktrace.as_deref(), Some(SEALED_MARKER), "the park's failure moved with it");
        }
    }
}
