//! Operator actions on sealed rows ([`crate::sealed`]): a patch opens the payload in memory,
//! applies, and seals the result again under the active key, and its audit entry keeps no
//! plaintext; validation opens in memory only. Without the key ring, a sealed row's payload
//! cannot be patched (a redrive or discard needs no key).

use std::sync::Arc;

use serde_json::Value;

use super::Admin;
use crate::Error;
use crate::record::{DeadLetter, Payload};
use crate::sealed::{self, KeyRing};

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

impl Admin {
    /// Opens and seals sealed rows with `keys` instead of the installed ring
    /// ([`install_keys`](crate::sealed::install_keys)): patches of sealed rows, and
    /// validation of their payloads, need it.
    #[must_use]
    pub fn keys(mut self, keys: KeyRing) -> Self {
        self.keys = Some(Arc::new(keys));
        self
    }

    fn key_ring(&self) -> Option<Arc<KeyRing>> {
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
