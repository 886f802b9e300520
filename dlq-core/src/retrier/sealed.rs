//! Sealed rows in the retrier: opened after the claim, their failures sealed before the
//! outcome is written (see [`crate::sealed`]).

use std::sync::Arc;

use crate::Error;
use crate::classify::FailureInfo;
use crate::record::{Claimed, Payload, Settlement};
use crate::sealed::{self, KeyRing, SealError};
use crate::store::prelude::*;

use super::{Counters, Retrier};

impl<S: DeadLetterStore + ?Sized> Retrier<S> {
    /// The ring it seals and opens with: its own ([`Retrier::keys`]), else the installed one.
    pub(super) fn key_ring(&self) -> Option<Arc<KeyRing>> {
        self.keys.clone().or_else(sealed::installed_keys)
    }

    /// Checked before anything is claimed: a handler with `encrypt = true` needs a key ring.
    pub(super) fn check_keys(&self) -> Result<(), Error> {
        if self.key_ring().is_some() {
            return Ok(());
        }
        match self.registry.iter().find(|reg| reg.sealing.is_some()) {
            Some(reg) => Err(SealError::NotConfigured { event_type: reg.event_type.to_owned() }.into()),
            None => Ok(()),
        }
    }

    /// The claimed rows with their payloads opened. A row this retrier cannot open (its key
    /// is not in the ring, or the key does not authenticate it) is left out: it is not run
    /// and nothing is counted against it; it stays claimed until its lease expires, when any
    /// retrier (one holding the key) may claim it again. Each is logged with its key id and
    /// counted in [`RetrierStats::sealed_unreadable`](super::RetrierStats::sealed_unreadable).
    ///
    /// The store marks them under this claim ([`PrivacyStore::mark_unreadable`](crate::store::PrivacyStore::mark_unreadable)), so
    /// `dlq stats` and health count them from any process.
    pub(super) async fn open_sealed(&self, claimed: Vec<Claimed>) -> Vec<Claimed> {
        if !claimed.iter().any(|c| sealed::sealed_key(&c.payload).is_some()) {
            return claimed;
        }
        let ring = self.key_ring();
        let mut unreadable = Vec::new();
        let opened = claimed
            .into_iter()
            .filter_map(|mut row| {
                let Some(key) = sealed::sealed_key(&row.payload).map(str::to_owned) else { return Some(row) };
                let payload = std::mem::replace(&mut row.payload, Payload::Json(serde_json::Value::Null));
                let opened = match ring.as_deref() {
                    Some(ring) => sealed::open_payload(ring, &row.event_type, payload),
                    None => Err(SealError::NoKeyProvider { hint: "this retrier has no key ring".into() }),
                };
                match opened {
                    Ok(payload) => {
                        row.payload = payload;
                        Some(row)
                    }
                    Err(error) => {
                        unreadable.push(row.lease);
                        Counters::add(&self.counters.sealed_unreadable, 1);
                        crate::observe::sealed_unreadable(&row.event_type);
                        tracing::error!(
                            event_type = %row.event_type,
                            dlq_id = row.id(),
                            key = %key,
                            %error,
                            "sealed row not run: this retrier cannot open it; it is left, uncounted, for a retrier that holds the key"
                        );
                        None
                    }
                }
            })
            .collect();
        if !unreadable.is_empty()
            && let Err(error) = self.store.mark_unreadable(unreadable).await
        {
            tracing::warn!(%error, "could not mark the unreadable sealed rows in the store: `dlq stats` does not count them");
        }
        opened
    }

    /// `outcome` with its failures sealed when the row's type is encrypted: the text a
    /// handler's error echoes never reaches the store in clear.
    pub(super) fn seal_outcome(&self, event_type: Option<&str>, outcome: Settlement) -> Settlement {
        let sealing = event_type.and_then(|t| self.registry.get(t).ok()).and_then(|reg| reg.sealing);
        let (Some(_), Some(event_type)) = (sealing, event_type) else { return outcome };
        let ring = self.key_ring();
        map_failures(outcome, &mut |failure| seal_or_withhold(ring.as_deref(), event_type, failure))
    }
}

/// `failure` sealed; without a ring (or should sealing fail), its texts are dropped, never
/// written in clear.
fn seal_or_withhold(ring: Option<&KeyRing>, event_type: &str, failure: FailureInfo) -> FailureInfo {
    let sealed = match ring {
        Some(ring) => sealed::seal_failure(ring, event_type, failure.clone()),
        None => Err(SealError::NotConfigured { event_type: event_type.to_owned() }),
    };
    sealed.unwrap_or_else(|error| FailureInfo {
        reason: format!("[failure text not kept: {error}]"),
        chain: Vec::new(),
        stacktrace: None,
        fingerprint: crate::classify::fingerprint(&failure.kind, "sealed"),
        ..failure
    })
}

/// `outcome` with `f` applied to every failure it writes.
fn map_failures(outcome: Settlement, f: &mut impl FnMut(FailureInfo) -> FailureInfo) -> Settlement {
    match outcome {
        Settlement::Retry { lease, delay, failure } => Settlement::Retry { lease, delay, failure: f(failure) },
        Settlement::Dead { lease, reason, failure, counts } => {
            Settlement::Dead { lease, reason, failure: f(failure), counts }
        }
        Settlement::Repeated { failed, last } => Settlement::Repeated {
            failed: failed.into_iter().map(&mut *f).collect(),
            last: Box::new(map_failures(*last, f)),
        },
        other => other,
    }
}
