//! Pause and resume per event type, and the circuits as `dlq stats` shows them.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Admin, required};
use crate::Error;
use crate::record::{Circuit, CircuitLogEntry, CircuitWrite, Circuits};

/// A pause to set (with its reason) or clear (with the resume's reason).
#[derive(Debug, Clone)]
enum Pause {
    Set(String),
    Clear(String),
}

/// How many times a pause or resume re-reads the circuit when a retrier wrote it meanwhile.
const CAS_ATTEMPTS: usize = 10;

impl Admin {
    /// Pauses `event_type`: no retrier claims it (within one poll interval) until
    /// [`resume_type`](Self::resume_type); its rows keep their state and retry counts. Logged with the
    /// actor and `reason` in the circuit log. Pausing a paused type changes nothing.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty type or reason; [`Error::Unsupported`] on a store
    /// without circuits; the store's error.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, MemoryStore};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let admin = Admin::new(store.clone(), "alice");
    /// let circuit = admin.pause_type("payment", "ledger migration until 14:00").await?;
    /// assert!(circuit.paused);
    /// assert!(!admin.resume_type("payment", None).await?.paused);
    ///
    /// let log = store.circuit_log(Some("payment".into()), 10).await?;
    /// assert_eq!((log[1].to.as_str(), log[1].actor.as_str()), ("paused", "alice"));
    /// assert_eq!(log[0].to, "resumed");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn pause_type(&self, event_type: &str, reason: &str) -> Result<Circuit, Error> {
        let reason = required(reason, "pause")?.to_owned();
        self.set_paused(event_type, Pause::Set(reason)).await
    }

    /// Resumes a paused `event_type` (its breaker state is left as it is). Resuming a type
    /// that is not paused changes nothing.
    ///
    /// # Errors
    /// As [`pause_type`](Self::pause_type).
    pub async fn resume_type(&self, event_type: &str, reason: Option<&str>) -> Result<Circuit, Error> {
        let reason = reason.map(str::trim).filter(|r| !r.is_empty()).unwrap_or("resumed by an operator");
        self.set_paused(event_type, Pause::Clear(reason.to_owned())).await
    }

    /// Whether `event_type` is known here: rows of that type are stored, a circuit was
    /// written for it, a live retrier handles it, the store's type catalog has its record, or
    /// the registry has its handler. What `dlq pause` and every `--event-type` filter check
    /// first, so that a misspelt type is not paused to no effect, nor listed as "no rows".
    ///
    /// # Errors
    /// The store's error.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let admin = Admin::new(Arc::new(dlq_core::MemoryStore::new()), "alice");
    /// assert!(!admin.knows_type("paymnet").await?);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn knows_type(&self, event_type: &str) -> Result<bool, Error> {
        let event_type = event_type.trim();
        if self.registry.as_ref().is_some_and(|r| r.event_types().any(|t| t == event_type)) {
            return Ok(true);
        }
        if self.store.count(crate::ListFilter::default().event_type(event_type).limit(1)).await? > 0 {
            return Ok(true);
        }
        if self.store.retriers().await?.iter().any(|r| r.event_types.iter().any(|t| t == event_type)) {
            return Ok(true);
        }
        if self.store.event_types().await?.iter().any(|t| t.event_type == event_type) {
            return Ok(true);
        }
        match self.store.circuits().await {
            Ok(read) => Ok(read.circuits.iter().any(|c| c.event_type == event_type)),
            Err(Error::Unsupported { .. }) => Ok(false),
            Err(err) => Err(err),
        }
    }

    async fn set_paused(&self, event_type: &str, pause: Pause) -> Result<Circuit, Error> {
        let paused = matches!(pause, Pause::Set(_));
        let event_type = event_type.trim();
        if event_type.is_empty() {
            return Err(Error::Invalid("name the event type to pause or resume".into()));
        }
        for _ in 0..CAS_ATTEMPTS {
            let read = self.store.circuits().await?;
            let current = read.get(event_type);
            if current.paused == paused {
                return Ok(current);
            }
            let write = self.pause_write(&current, read.at, pause.clone());
            if let Some(written) = self.store.write_circuit(write).await? {
                crate::observe::circuit_transition(event_type, if paused { "paused" } else { "resumed" });
                tracing::info!(event_type, actor = %self.actor, paused = written.paused, "circuit pause changed");
                return Ok(written);
            }
        }
        Err(Error::Invalid(format!("the circuit of {event_type:?} keeps changing; try again")))
    }

    /// The write that sets or clears the pause, keeping the breaker's state and deadlines.
    fn pause_write(&self, current: &Circuit, at: DateTime<Utc>, pause: Pause) -> CircuitWrite {
        let left = |until: Option<DateTime<Utc>>| until.map(|u| (u - at).to_std().unwrap_or(Duration::ZERO));
        let (reason, pause) = match pause {
            Pause::Set(reason) => (reason.clone(), Some(reason)),
            Pause::Clear(reason) => (reason, None),
        };
        let mut write = current.write(current.state, &self.actor, reason);
        write.open_for = left(current.open_until);
        write.trial_owner.clone_from(&current.trial_owner);
        write.trial_for = left(current.trial_until);
        write.paused = pause.is_some();
        write.paused_by = pause.is_some().then(|| self.actor.clone());
        write.pause_reason = pause;
        write.logged_as = if write.paused { "paused" } else { "resumed" };
        write
    }

    /// Every circuit the store has written (types never written are closed), with the
    /// store's clock.
    ///
    /// # Errors
    /// The store's error.
    pub async fn circuits(&self) -> Result<Circuits, Error> {
        self.store.circuits().await
    }

    /// The last `limit` circuit changes (transitions, pauses, resumes), newest first.
    ///
    /// # Errors
    /// The store's error.
    pub async fn circuit_log(&self, event_type: Option<&str>, limit: usize) -> Result<Vec<CircuitLogEntry>, Error> {
        self.store.circuit_log(event_type.map(str::to_owned), limit).await
    }
}
