//! Sealed rows in the retrier: the key ring it opens them with (the pipeline opens them after
//! the claim) and the sealing of their failures before the outcome is written (see
//! [`crate::sealed`]).

use std::sync::Arc;

use crate::Error;
use crate::classify::FailureInfo;
use crate::record::Settlement;
use crate::sealed::{self, KeyRing, SealError};
use crate::store::prelude::*;

use super::Retrier;

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
}

/// `outcome` with every failure it writes sealed for `event_type`, an encrypted type: the text
/// a handler's error echoes never reaches the store in clear.
pub(super) fn seal_failures(ring: Option<&KeyRing>, event_type: &str, outcome: Settlement) -> Settlement {
    map_failures(outcome, &mut |failure| seal_or_withhold(ring, event_type, failure))
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
