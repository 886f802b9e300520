//! The operator layer: every read and action of the `dlq` command line and the web console,
//! as library calls over any [`DeadLetterStore`].
//!
//! Each action validates its input, runs in bounded transactions, and writes the audit log
//! with the actor and the reason; the CLI verb and the console button are thin shells over
//! the same call, so they cannot disagree.
//!
//! ```
//! use dlq_core::admin::{Admin, BulkPlan, Pacing};
//! use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload, adapter::DeadReason, Status};
//! use std::sync::Arc;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let store = Arc::new(MemoryStore::new());
//! let failure = FailureInfo::new(ErrorClass::Permanent, "BadCurrency", "currency \"USD \"".into(), vec![], None);
//! let payload = Payload::Json(serde_json::json!({"id": 7, "currency": "USD "}));
//! let id = store.park(NewDeadLetter::new("payment", payload, failure).dead(DeadReason::Permanent)).await?.id;
//!
//! let admin = Admin::new(store.clone(), "alice");
//! // Repair the payload with an RFC 6902 patch, then replay it.
//! let patch = serde_json::json!([{"op": "replace", "path": "/currency", "value": "USD"}]);
//! admin.patch(id, &patch, "trailing space from the POS firmware").await?;
//! let plan = BulkPlan::redrive(ListFilter::default().ids([id]), "currency fixed");
//! let report = admin.start(plan).await?.run(Pacing::default(), |_| std::ops::ControlFlow::Continue(())).await?;
//! assert_eq!(report.moved, 1);
//! assert_eq!(store.get_now(id).unwrap().status, Status::Pending);
//! # Ok::<(), dlq_core::Error>(())
//! # }).unwrap();
//! ```

mod bulk;
mod circuits;
pub mod json;
mod patch;
mod sealed;
pub(crate) mod stats;
mod upgrade;
mod validation;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

pub use bulk::{
    Bulk, BulkPlan, BulkProgress, BulkReport, CanaryFailure, CanaryStop, DEFAULT_MAX_REDRIVES, Pacing, Validator,
};
pub use patch::{PatchManyReport, PatchRefusal, RowPatch};
pub use sealed::RekeyReport;
pub use stats::{Growth, Orphan, StatsReport, StatusCounts};
pub use upgrade::UpgradeReport;
pub use validation::{GroupValidation, Undecodable, ValidationReport};

/// The records an operator reads: a row's attempts and audit log, failure groups, counts by
/// type and status, the retriers' heartbeats.
pub use crate::record::{
    AttemptRecord, AuditEntry, Change, DeadReason, Detail, FailureGroup, Order, RetrierHeartbeat, StatsRow,
};
pub use crate::record::{hex, unhex};

/// Whether `c` must not reach an operator's screen as it is: a control character (bar the
/// newline and tab: C0, DEL, C1) or a bidi formatting character (letter marks, embeddings,
/// overrides, isolates), which reorder what is shown around them (`\u{202e}` makes `fdp.exe`
/// read `exe.pdf`). Stored text is attacker text: the `dlq` command line shows each such
/// character as `.`, the console as its escape (`\u001b`).
///
/// ```
/// use dlq_core::admin::is_hazard;
/// assert!(is_hazard('\u{1b}') && is_hazard('\u{9b}') && is_hazard('\u{202e}'));
/// assert!(!is_hazard('\n') && !is_hazard('\t') && !is_hazard('é'));
/// ```
pub const fn is_hazard(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{b}'..='\u{1f}' | '\u{7f}'..='\u{9f}' // C0 but \t \n, DEL, C1
        | '\u{61c}' | '\u{200e}' | '\u{200f}' // letter marks
        | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') // embeddings, overrides, isolates
}

/// An error and its `source()` chain on one line, each cause once: what the CLI and the
/// console show an operator.
///
/// ```
/// let err = dlq_core::Error::store(std::io::Error::other("connection refused"));
/// assert_eq!(dlq_core::admin::one_line(&err), "dead-letter store failed: connection refused");
/// ```
pub fn one_line(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

use crate::record::{AuditNote, DeadLetter, DlqId, ListFilter, Payload};
use crate::store::{PatchRequest, payload_from_diff, prelude::*};
use crate::{Error, registry::Registry};

/// The admin layer over one store, acting as one operator.
///
/// Cheap to clone. The optional [`Registry`] (set by a service that embeds the CLI or the
/// console) names the expected handler of orphaned event types and lets a validating redrive
/// or patch refuse payloads that would not decode into the handler's event type; a
/// [`Validator`] adds checks of the service's own.
#[derive(Clone)]
pub struct Admin {
    store: Arc<dyn DeadLetterStore>,
    actor: String,
    registry: Option<Registry>,
    validator: Option<Validator>,
    check_patches: bool,
    keys: Option<Arc<crate::sealed::KeyRing>>,
    subject_key: Option<crate::subject::SubjectKey>,
    redaction: crate::redact::Policy,
    /// The store's type catalog, to validate by when there is no registry (the stock CLI).
    catalog: Option<Arc<crate::catalog::Catalog>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("actor", &self.actor).finish_non_exhaustive()
    }
}

/// A page of [`Admin::list`]: the rows, and the id to pass as `after` for the next page.
#[derive(Debug, Clone)]
pub struct Page {
    /// The rows, in the filter's order.
    pub rows: Vec<DeadLetter>,
    /// The last row's id when the page was full (there may be more), else `None`.
    pub next: Option<DlqId>,
}

/// What a patch or an undo did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PatchOutcome {
    /// The row.
    pub id: DlqId,
    /// The audit entry written (undo it with [`Admin::undo`]).
    pub audit_id: i64,
    /// The payload before (redacted fields masked, as every payload the admin layer shows).
    #[serde(skip)]
    pub old: Payload,
    /// The payload after (likewise).
    #[serde(skip)]
    pub new: Payload,
}

impl Admin {
    /// The admin layer over `store`, recording `actor` on every audited action.
    pub fn new(store: Arc<dyn DeadLetterStore>, actor: impl Into<String>) -> Self {
        Self {
            store,
            actor: actor.into(),
            registry: None,
            validator: None,
            check_patches: false,
            keys: None,
            subject_key: None,
            redaction: crate::redact::Policy::default(),
            catalog: None,
        }
    }

    /// Masks, besides the registry's (`redact = [...]` on each handler), the fields `policy`
    /// names in every row, payload and text this admin returns ([`crate::redact`]); only
    /// [`reveal`](Self::reveal) shows them, audited.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, Payload, redact::Policy, store::NewDeadLetter};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "NoUser", "no user alice@example.com".into(), vec![], None);
    /// let payload = Payload::Json(serde_json::json!({"email": "alice@example.com"}));
    /// let id = store.park(NewDeadLetter::new("signup", payload, failure)).await?.id;
    /// let admin = Admin::new(store, "alice").with_redaction(Policy::default().redact("signup", ["/email"]));
    /// let shown = admin.show(id).await?;
    /// assert_eq!(shown.letter.payload, Payload::Json(serde_json::json!({"email": "[redacted]"})));
    /// assert_eq!(shown.letter.failure.reason, "no user [redacted]");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    #[must_use]
    pub fn with_redaction(mut self, policy: crate::redact::Policy) -> Self {
        self.redaction = self.redaction.merge(policy);
        self
    }

    /// The fields this admin masks now: its own policy (the registry's, [`with_redaction`]'s)
    /// and what the store's type catalog says of each type (each handler's `redact = [...]`,
    /// published by the retriers: [`crate::catalog`]), read again on every read, so an admin
    /// without the handlers (the stock `dlq` binary, a console given no registry) masks them
    /// too, a type published after it was made included. A store without a catalog adds
    /// nothing.
    ///
    /// [`with_redaction`]: Self::with_redaction
    ///
    /// # Errors
    /// The store's error reading the catalog (nothing is shown unmasked for want of it).
    pub async fn redaction(&self) -> Result<std::borrow::Cow<'_, crate::redact::Policy>, Error> {
        let records = match self.store.event_types().await {
            Ok(records) => records,
            Err(Error::Unsupported { .. }) => Vec::new(),
            Err(error) => return Err(error),
        };
        Ok(std::borrow::Cow::Owned(self.redaction.clone().merge(crate::redact::Policy::from_catalog(&records))))
    }

    /// Knows the service's handlers: orphaned types are reported with the expected handler,
    /// and validation ([`check`](Self::check)) decodes payloads into their handler's event type.
    #[must_use]
    pub fn with_registry(mut self, registry: Registry) -> Self {
        self.redaction = std::mem::take(&mut self.redaction).merge(crate::redact::Policy::from_registry(&registry));
        self.registry = Some(registry);
        self
    }

    /// Checks each row before a redrive with `validator` too (see [`BulkPlan::validate`]).
    #[must_use]
    pub fn with_validator(mut self, validator: Validator) -> Self {
        self.validator = Some(validator);
        self
    }

    /// Refuses a patch (or a replaced payload) that [`check`](Self::check) rejects:
    /// `dlq patch --validate`. Patches then fail with [`Error::Invalid`] when this admin can
    /// validate nothing (no registry, no validator).
    #[must_use]
    pub const fn with_patch_validation(mut self) -> Self {
        self.check_patches = true;
        self
    }

    /// Hashes subjects with `key` ([`erase`](Self::erase)) instead of the process's key
    /// ([`crate::subject::key`]: `DLQ_SUBJECT_KEY`).
    #[must_use]
    pub fn with_subject_key(mut self, key: crate::subject::SubjectKey) -> Self {
        self.subject_key = Some(key);
        self
    }

    /// Deletes every row of one data subject (a customer, a card holder: what the events
    /// named with [`SourceMeta::subject`](crate::adapter::SourceMeta::subject) or their handler's
    /// `subject = "/pointer"`), whatever its status, with its attempts and audit entries,
    /// and leaves a record of the erasure ([`Erasure`](crate::subject::Erasure)) holding the
    /// actor, `reason`, the counts and the first digits of the subject's keyed hash: nothing
    /// of the subject or the rows. The subject is hashed with the same key the service
    /// parked with.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::admin::Admin;
    /// use dlq_core::subject::{Count, SubjectKey};
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let key = SubjectKey::new("the service's key, thirty-two bytes or more")?;
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "ledger down".into(), vec![], None);
    /// for (n, who) in [(1, "customer-42"), (2, "customer-42"), (3, "customer-7")] {
    ///     let letter = NewDeadLetter::new("payment", Payload::Json(n.into()), failure.clone());
    ///     store.park(letter.with_subject(key.hash(who))).await?;
    /// }
    /// let admin = Admin::new(store.clone(), "alice").with_subject_key(key);
    /// assert!(admin.erase("customer-42", " ").await.is_err(), "an erasure needs a reason");
    /// assert_eq!(admin.erasable("customer-42").await?, 2, "what the confirmation shows");
    /// let erased = admin.erase("customer-42", "GDPR request 118").await?;
    /// assert_eq!((erased.rows, erased.attempts), (Count::Of(2), Count::Of(2)));
    /// assert_eq!(store.len(), 1, "customer-7's row stays");
    /// assert_eq!(store.erasures(10).await?[0].reason, "GDPR request 118");
    ///
    /// // The store keeps the first key's check value: another key is refused, nothing recorded.
    /// let wrong = Admin::new(store.clone(), "bob").with_subject_key(SubjectKey::new([7u8; 32])?);
    /// assert!(matches!(wrong.erase("customer-7", "GDPR request 119").await, Err(dlq_core::Error::Config { .. })));
    /// assert_eq!((store.len(), store.erasures(10).await?.len()), (1, 1));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty subject or reason; [`Error::Config`] when no subject key
    /// is configured, or when it is not the key the store's subjects were hashed with (its
    /// check value, [`check_key`](crate::subject::check_key), differs from the one the store
    /// keeps): nothing is deleted or recorded then; the store's error.
    pub async fn erase(&self, subject: &str, reason: &str) -> Result<crate::subject::Erasure, Error> {
        let reason = required(reason, "erase")?;
        let hash = self.subject_hash(subject).await?;
        let request = crate::subject::EraseRequest::new(hash, self.note(Some(reason)));
        let erased = self.store.erase(request).await?;
        crate::observe::admin_action("erase", erased.rows.get().unwrap_or_default());
        Ok(erased)
    }

    /// How many rows an [`erase`](Self::erase) of `subject` would delete now, whatever their
    /// status: what an erasure's confirmation shows. The key is checked as `erase` checks it.
    /// The example of [`erase`](Self::erase) shows it.
    ///
    /// # Errors
    /// As [`erase`](Self::erase)'s, but for the reason.
    pub async fn erasable(&self, subject: &str) -> Result<u64, Error> {
        let hash = self.subject_hash(subject).await?;
        self.store.count_subject(hash).await
    }

    /// The keyed hash of `subject`, once the key is found to be the store's.
    async fn subject_hash(&self, subject: &str) -> Result<crate::subject::SubjectHash, Error> {
        if subject.trim().is_empty() {
            return Err(Error::Invalid("erase needs a subject (--subject)".into()));
        }
        let key = match &self.subject_key {
            Some(key) => key,
            None => crate::subject::required_key("erase")?,
        };
        let stored = self.store.subject_key_check(key.check()).await?;
        crate::subject::check_key(key, &stored)?;
        Ok(key.hash(subject))
    }

    /// The newest `limit` erasure records, newest first ([`erase`](Self::erase)).
    ///
    /// # Errors
    /// [`Error::Unsupported`] for a store without erasure; the store's error.
    pub async fn erasures(&self, limit: usize) -> Result<Vec<crate::subject::Erasure>, Error> {
        self.store.erasures(limit).await
    }

    /// Validates rows by the store's type catalog ([`crate::catalog`]) where it has no
    /// registry: what the stock `dlq` binary does, without the handlers' code. A row then
    /// passes when its version is one its type's handler takes and its payload matches that
    /// version's JSON Schema, when the type exports one ([`Catalog::verdict`]).
    ///
    /// [`Catalog::verdict`]: crate::catalog::Catalog::verdict
    #[must_use]
    pub fn with_catalog(mut self, catalog: crate::catalog::Catalog) -> Self {
        self.catalog = Some(Arc::new(catalog));
        self
    }

    /// Whether this admin can validate rows: it has a registry, a type catalog or a validator.
    pub const fn can_validate(&self) -> bool {
        self.registry.is_some() || self.catalog.is_some() || self.validator.is_some()
    }

    /// Why `letter` would fail again as it is, checked without running its handler: with a
    /// registry, its payload, upcast from its version to its handler's, must deserialize into
    /// the handler's event type (and a handler must be registered for its type); with a
    /// validator, the validator must accept it.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{DeadLetter, ErrorClass, classify::FailureInfo, MemoryStore, Payload};
    /// use std::sync::Arc;
    ///
    /// #[dlq_core::dead_letter(event_type = "doc-admin-check")]
    /// async fn handle(amount_cents: u64) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let admin = Admin::new(Arc::new(MemoryStore::new()), "alice").with_registry(dlq_core::handlers![handle]?);
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "undecodable", "bad".into(), vec![], None);
    /// let payload = Payload::Json(serde_json::json!(1004));
    /// let mut letter = DeadLetter::new(1, "doc-admin-check", payload, failure, chrono::Utc::now());
    /// assert_eq!(admin.check(&letter), Ok(()));
    /// letter.payload = Payload::Json(serde_json::json!("10.04"));
    /// assert!(admin.check(&letter).unwrap_err().contains("does not deserialize into `u64`"));
    /// # Ok::<(), dlq_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// The reason, one line.
    pub fn check(&self, letter: &DeadLetter) -> Result<(), String> {
        if let Some(registry) = &self.registry {
            let registration = registry.get(&letter.event_type).map_err(|e| e.to_string())?;
            // A sealed payload is opened in memory; one this admin cannot open is not checked
            // here (the retrier that holds its key decides). The payload is checked as a retry
            // decodes it: upcast from the row's version.
            if let Some(payload) = self.opened_for_check(&letter.event_type, &letter.payload) {
                registration.check_payload(&registration.upcast(letter.version, payload)?)?;
            }
        } else if self.catalog.is_some()
            && let crate::catalog::Verdict::Not(why) = self.verdict(letter)
        {
            return Err(why);
        }
        match &self.validator {
            Some(validator) => validator(letter),
            None => Ok(()),
        }
    }

    /// The same admin acting as another operator: what the web console does per request,
    /// with the actor its embedding service's auth names.
    ///
    /// ```
    /// let admin = dlq_core::admin::Admin::new(std::sync::Arc::new(dlq_core::MemoryStore::new()), "console");
    /// assert_eq!(admin.acting_as("alice").actor(), "alice");
    /// ```
    #[must_use]
    pub fn acting_as(&self, actor: impl Into<String>) -> Self {
        Self { actor: actor.into(), ..self.clone() }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn DeadLetterStore> {
        &self.store
    }

    /// The operator recorded in the audit log.
    pub fn actor(&self) -> &str {
        &self.actor
    }

    fn note(&self, reason: Option<&str>) -> AuditNote {
        AuditNote { actor: self.actor.clone(), reason: reason.map(str::to_owned) }
    }

    /// One page of rows matching `filter` (keyset: pass [`Page::next`] as `after`), each as
    /// an operator sees it: redacted fields masked ([`with_redaction`](Self::with_redaction)).
    ///
    /// # Errors
    /// The store's error.
    pub async fn list(&self, filter: ListFilter) -> Result<Page, Error> {
        let rows = self.store.list(filter.clone()).await?;
        let next = if rows.len() >= filter.limit { rows.last().map(|r| r.id) } else { None };
        let policy = self.redaction().await?;
        let mut shown = Vec::with_capacity(rows.len());
        for row in rows {
            // Masked once, then matched on the masked reason, as `select` matches.
            let row = self.shown_row(&policy, row).await?;
            if filter.reason.as_deref().is_none_or(|needle| row.failure.reason.contains(needle)) {
                shown.push(row);
            }
        }
        Ok(Page { rows: shown, next })
    }

    /// `row` as an operator is shown it in a list: masked as [`show`](Self::show) masks it.
    /// A row of a type that redacts is masked with its audit log's payloads too: its error
    /// texts may quote a value a patch has since replaced, which only the audit log still
    /// holds (one more read per such row; other rows cost nothing).
    pub(crate) async fn shown_row(&self, policy: &crate::redact::Policy, row: DeadLetter) -> Result<DeadLetter, Error> {
        if policy.pointers(&row.event_type).is_empty() {
            return Ok(row);
        }
        let audit = self.store.audit(row.id).await?;
        let mut detail = Detail { letter: row, attempts: Vec::new(), audit };
        policy.detail(&mut detail);
        Ok(detail.letter)
    }

    /// One page of the rows `filter` selects, as stored, for every read and bulk walk of the
    /// admin layer: the door between the store and what an operator is shown. A reason filter
    /// matches the reason as an operator is shown it (masked as in a list): the store matches
    /// the stored text, and a row whose match falls on a redacted value is dropped here, so a
    /// guess at a masked card number finds nothing.
    pub(crate) async fn select(&self, filter: &ListFilter) -> Result<Selected, Error> {
        let rows = self.store.list(filter.clone()).await?;
        let last = rows.last().map(|r| r.id);
        let full = rows.len() >= filter.limit;
        let Some(needle) = filter.reason.as_deref() else { return Ok(Selected { rows, last, full }) };
        let policy = self.redaction().await?;
        if policy.is_empty() {
            return Ok(Selected { rows, last, full });
        }
        let mut kept = Vec::with_capacity(rows.len());
        for row in rows {
            if self.shown_row(&policy, row.clone()).await?.failure.reason.contains(needle) {
                kept.push(row);
            }
        }
        Ok(Selected { rows: kept, last, full })
    }

    /// Whether `filter` selects any row an operator can see match it (a reason filter
    /// matching the masked text, as [`list`](Self::list) matches it): a bulk verb's "nothing
    /// matched" check, which must not tell a masked value's guess apart.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, Payload, redact::Policy, store::NewDeadLetter};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "Declined", "card 4111111111111111 declined".into(), vec![], None);
    /// let payload = Payload::Json(serde_json::json!({"pan": "4111111111111111"}));
    /// store.park(NewDeadLetter::new("payment", payload, failure)).await?;
    /// let admin = Admin::new(store, "alice").with_redaction(Policy::default().redact("payment", ["/pan"]));
    /// assert!(admin.selects_any(&ListFilter::default().reason_contains("declined")).await?);
    /// assert!(!admin.selects_any(&ListFilter::default().reason_contains("card 4111")).await?, "a guess finds nothing");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// The store's.
    pub async fn selects_any(&self, filter: &ListFilter) -> Result<bool, Error> {
        let needs_door = filter.reason.is_some() && !self.redaction().await?.is_empty();
        if !needs_door {
            return Ok(self.store.count(filter.clone().limit(1)).await? > 0);
        }
        let mut page = filter.clone().oldest_first().after(0).limit(500);
        loop {
            let selected = self.select(&page).await?;
            if !selected.rows.is_empty() {
                return Ok(true);
            }
            match selected.last.filter(|_| selected.full) {
                Some(last) => page = page.after(last),
                None => return Ok(false),
            }
        }
    }

    /// A row with its attempts and audit log, as an operator sees it: redacted fields masked
    /// in the payload, the audit log's payloads and every text ([`crate::redact`]).
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown id; the store's error.
    pub async fn show(&self, id: DlqId) -> Result<Detail, Error> {
        let mut detail = self.whole(id).await?;
        self.redaction().await?.detail(&mut detail);
        Ok(detail)
    }

    /// A row with its attempts and audit log as stored.
    async fn whole(&self, id: DlqId) -> Result<Detail, Error> {
        let letter = self.store.get(id).await?.ok_or(Error::NotFound(id))?;
        let attempts = self.store.attempts(id).await?;
        let audit = self.store.audit(id).await?;
        Ok(Detail { letter, attempts, audit })
    }

    /// Row `id` whole, for an operator allowed to see it: the redacted fields unmasked and,
    /// when this admin holds the key ring, a sealed payload and failure opened. The audit log
    /// gets a `reveal` entry with the actor and `reason` (required) first: nothing is shown
    /// unless it was written.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, Payload, redact::Policy, store::NewDeadLetter};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "Declined", "declined".into(), vec![], None);
    /// let payload = Payload::Json(serde_json::json!({"pan": "4111111111111111"}));
    /// let id = store.park(NewDeadLetter::new("payment", payload.clone(), failure)).await?.id;
    /// let admin = Admin::new(store.clone(), "alice").with_redaction(Policy::default().redact("payment", ["/pan"]));
    /// assert!(admin.reveal(id, " ").await.is_err(), "a reveal needs a reason");
    /// assert_eq!(admin.reveal(id, "chargeback 118").await?.letter.payload, payload);
    /// let audit = store.audit(id).await?;
    /// assert_eq!((audit[0].action.as_str(), audit[0].actor.as_str()), ("reveal", "alice"));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty reason; [`Error::NotFound`]; [`Error::Unsupported`] for
    /// a store that cannot audit a reveal (nothing is shown); the store's error.
    pub async fn reveal(&self, id: DlqId, reason: &str) -> Result<Detail, Error> {
        let reason = required(reason, "reveal")?;
        self.store.reveal(id, self.note(Some(reason))).await?;
        let mut detail = self.whole(id).await?;
        if let Some(ring) = self.key_ring() {
            let event_type = detail.letter.event_type.clone();
            if crate::sealed::sealed_key(&detail.letter.payload).is_some() {
                let sealed = std::mem::replace(&mut detail.letter.payload, Payload::Json(serde_json::Value::Null));
                detail.letter.payload =
                    crate::sealed::open_payload(&ring, &event_type, sealed.clone()).unwrap_or(sealed);
            }
            if crate::sealed::is_sealed_failure(&detail.letter.failure)
                && let Ok(opened) = crate::sealed::open_failure(&ring, &event_type, detail.letter.failure.clone())
            {
                detail.letter.failure = opened;
            }
        }
        Ok(detail)
    }

    /// The live retriers, from their heartbeat rows.
    ///
    /// # Errors
    /// The store's error.
    pub async fn workers(&self) -> Result<Vec<RetrierHeartbeat>, Error> {
        self.store.retriers().await
    }

    /// Applies an RFC 6902 JSON Patch to a row's JSON payload, audited with `reason`, the
    /// patch and the original payload.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty reason, a patch that is not RFC 6902, a payload that is
    /// not JSON, or a patch that does not apply; [`Error::InvalidState`] for a `SUCCEEDED` row
    /// (or one being retried); [`Error::NotFound`]; the store's error.
    pub async fn patch(&self, id: DlqId, patch: &serde_json::Value, reason: &str) -> Result<PatchOutcome, Error> {
        let reason = required(reason, "patch")?;
        let ops = patch::parse(patch)?;
        let (letter, reseal) = self.open_for_patch(self.patchable(id, "patch").await?)?;
        let new = patch::apply(&letter, &ops)?;
        self.write_patch(letter, new, reason, Some(patch.clone()), None, reseal).await
    }

    /// What [`patch`](Self::patch) would change in row `id`, writing nothing: the changes,
    /// each value masked where the type redacts it, and every value `[encrypted]` when the
    /// row is sealed (a dry run reveals nothing; [`reveal`](Self::reveal) does, audited), and
    /// how the patched row would decode when this admin can tell. A patch that would be
    /// refused is refused here by the same rule, with the same error.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, Payload, redact::Policy, store::NewDeadLetter};
    /// use std::sync::Arc;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "Declined", "declined".into(), vec![], None);
    /// let payload = Payload::Json(serde_json::json!({"pan": "4111111111111111", "currency": "USD "}));
    /// let id = store.park(NewDeadLetter::new("payment", payload.clone(), failure)).await?.id;
    /// let admin = Admin::new(store.clone(), "alice").with_redaction(Policy::default().redact("payment", ["/pan"]));
    /// let patch = serde_json::json!([{"op": "replace", "path": "/pan", "value": "5500005555555559"}]);
    /// let dry = admin.patch_dry_run(id, &patch).await?;
    /// assert_eq!(dry.changes[0].new, Some(serde_json::json!("[redacted]")));
    /// assert_eq!(store.get(id).await?.unwrap().payload, payload, "nothing written");
    /// let bad = serde_json::json!([{"op": "remove", "path": "/absent"}]);
    /// assert!(admin.patch_dry_run(id, &bad).await.is_err(), "refused as the real patch would be");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`patch`](Self::patch), bar the reason (a dry run writes no audit entry).
    pub async fn patch_dry_run(&self, id: DlqId, patch: &serde_json::Value) -> Result<RowPatch, Error> {
        let ops = patch::parse(patch)?;
        let stored = self.patchable(id, "patch").await?;
        let sealed = crate::sealed::sealed_key(&stored.payload).is_some();
        let (letter, _) = self.open_for_patch(stored.clone())?;
        let new = patch::apply(&letter, &ops)?;
        let policy = self.redaction().await?;
        let shown = |why: String| policy.scrub(&letter.event_type, &[&letter.payload, &new], &why).into_owned();
        self.check_patched(&letter, &new).map_err(|e| match e {
            Error::Invalid(why) => Error::Invalid(shown(why)),
            other => other,
        })?;
        let mut changes = match (&letter.payload, &new) {
            (Payload::Json(old), Payload::Json(new)) => patch::changes(old, new),
            _ => Vec::new(),
        };
        if changes.is_empty() {
            return Err(Error::Invalid(format!("the patch changes nothing in dead letter {id}")));
        }
        policy.changes(&letter.event_type, &mut changes);
        if sealed {
            let hidden = serde_json::Value::String(crate::redact::ENCRYPTED_TEXT.to_owned());
            for change in &mut changes {
                for value in [&mut change.old, &mut change.new].into_iter().flatten() {
                    *value = hidden.clone();
                }
            }
        }
        let patched = DeadLetter { payload: new.clone(), ..letter.clone() };
        // A sealed row's verdict is taken on the opened payload, and names no value of it.
        let decodes = self.can_judge().then(|| self.verdict(&patched).map_text(shown));
        Ok(RowPatch { id, changes, decodes })
    }

    /// Replaces a row's payload whole (what `dlq patch` without `--patch` writes after the
    /// editor), audited with `reason`.
    ///
    /// # Errors
    /// As [`patch`](Self::patch).
    pub async fn replace_payload(&self, id: DlqId, payload: Payload, reason: &str) -> Result<PatchOutcome, Error> {
        let reason = required(reason, "patch")?;
        let (letter, reseal) = self.open_for_patch(self.patchable(id, "patch").await?)?;
        // Written from the masked payload an operator was shown: masked fields keep their value.
        let payload = self.redaction().await?.unmask(&letter.event_type, &letter.payload, payload);
        self.write_patch(letter, payload, reason, None, None, reseal).await
    }

    /// Restores the payload a patch replaced, audited as a patch naming the entry undone.
    ///
    /// Restoring the payload an older patch replaced would silently throw away every patch
    /// made to the row after it (their repairs, and their undos): unless `force`, such an undo
    /// is refused with the later entries listed. Undo the latest patch first, or force it.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, store::NewDeadLetter, Payload};
    /// use serde_json::json;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
    /// let id = store.park(NewDeadLetter::new("payment", Payload::Json(json!({"a": 1})), failure)).await?.id;
    /// let admin = Admin::new(store, "alice");
    /// let first = admin.patch(id, &json!([{"op": "replace", "path": "/a", "value": 2}]), "fix a").await?;
    /// admin.patch(id, &json!([{"op": "add", "path": "/b", "value": 3}]), "add b").await?;
    /// let refused = admin.undo(first.audit_id, None, false).await.unwrap_err();
    /// assert!(refused.to_string().contains("add b"), "{refused}");
    /// let undone = admin.undo(first.audit_id, None, true).await?;
    /// assert_eq!(undone.new, Payload::Json(json!({"a": 1})));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::AuditNotFound`]; [`Error::Invalid`] when the entry is not a patch, or (unless
    /// `force`) when later patches of the row would be reverted; [`Error::InvalidState`] when
    /// the row has `SUCCEEDED` since (or is being retried); the store's error.
    pub async fn undo(&self, audit_id: i64, reason: Option<&str>, force: bool) -> Result<PatchOutcome, Error> {
        let entry = self.store.audit_entry(audit_id).await?.ok_or(Error::AuditNotFound(audit_id))?;
        let original =
            (entry.action == "patch").then(|| payload_from_diff(&entry.diff)).flatten().ok_or_else(|| {
                Error::Invalid(format!(
                    "audit entry {audit_id} is a {}, not a patch: only patches can be undone",
                    entry.action
                ))
            })?;
        let letter = self.patchable(entry.dlq_id, "undo").await?;
        if !force {
            let later: Vec<AuditEntry> = self
                .store
                .audit(entry.dlq_id)
                .await?
                .into_iter()
                .filter(|a| a.id > audit_id && a.action == "patch")
                .collect();
            if !later.is_empty() {
                // The refusal quotes the later entries' reasons: shown as `dlq show` shows them.
                let mut shown = Detail { letter: letter.clone(), attempts: Vec::new(), audit: later };
                self.redaction().await?.detail(&mut shown);
                return Err(Error::Invalid(later_patches(audit_id, entry.dlq_id, &shown.audit)));
            }
        }
        let default = format!("undo of audit entry {audit_id}");
        let reason = reason.filter(|r| !r.trim().is_empty()).unwrap_or(&default);
        // The audit diff of a sealed row holds the sealed payload: restored as it is.
        self.write_patch(letter, original, reason, None, Some(audit_id), None).await
    }

    /// Row `id`, when its payload may be patched (or a patch of it undone): not a `SUCCEEDED`
    /// row, whose payload is the one its handler ran with.
    async fn patchable(&self, id: DlqId, action: &'static str) -> Result<DeadLetter, Error> {
        let letter = self.store.get(id).await?.ok_or(Error::NotFound(id))?;
        not_succeeded(&letter, action)?;
        Ok(letter)
    }

    /// Writes `new` over `letter`'s payload, checked first when patches are validated (an
    /// undo restores what was there: it is not checked).
    async fn write_patch(
        &self,
        letter: DeadLetter,
        new: Payload,
        reason: &str,
        patch: Option<serde_json::Value>,
        undo_of: Option<i64>,
        reseal: Option<sealed::Reseal>,
    ) -> Result<PatchOutcome, Error> {
        let (id, old) = (letter.id, letter.payload.clone());
        let policy = self.redaction().await?;
        if undo_of.is_none() {
            // The refusal may quote the payloads' values: scrubbed as every shown text is.
            self.check_patched(&letter, &new).map_err(|e| match e {
                Error::Invalid(why) => {
                    Error::Invalid(policy.scrub(&letter.event_type, &[&old, &new], &why).into_owned())
                }
                other => other,
            })?;
        }
        let note = self.note(Some(reason));
        let (stored, patch) = match &reseal {
            Some(reseal) => (reseal.seal(&letter.event_type, &new)?, patch.map(sealed::Reseal::redact)),
            None => (new.clone(), patch),
        };
        let request = PatchRequest { id, payload: stored.clone(), note, patch, undo_of };
        let audit_id = self.store.patch(request).await?;
        crate::observe::admin_action(if undo_of.is_some() { "undo" } else { "patch" }, 1);
        // A sealed row's outcome is what is stored, sealed: opened only by an audited reveal.
        let (old, new) = match reseal {
            Some(reseal) => (reseal.stored, stored),
            None => (old, new),
        };
        let (old, _) = policy.shown(&letter.event_type, &old);
        let (new, _) = policy.shown(&letter.event_type, &new);
        Ok(PatchOutcome { id, audit_id, old, new })
    }

    /// With patch validation on, refuses `new` as `letter`'s payload when it would fail again.
    fn check_patched(&self, letter: &DeadLetter, new: &Payload) -> Result<(), Error> {
        self.check_new(letter, new, self.check_patches)
    }

    /// With `validate`, refuses `new` as `letter`'s payload when it would fail again.
    fn check_new(&self, letter: &DeadLetter, new: &Payload, validate: bool) -> Result<(), Error> {
        if !validate {
            return Ok(());
        }
        if !self.can_validate() {
            return Err(Error::Invalid(NO_VALIDATION.into()));
        }
        let patched = DeadLetter { payload: new.clone(), ..letter.clone() };
        self.check(&patched).map_err(|why| {
            Error::Invalid(format!("the patched payload of dead letter {} would fail again: {why}", letter.id))
        })
    }

    /// Redrives every `FAILED_PERMANENTLY` row `filter` selects, to the last one: the
    /// shorthand of [`start`](Self::start)`(`[`BulkPlan::redrive`]`(filter, reason))` run
    /// unpaced to its end. Rows are walked oldest first in batches of one transaction each
    /// (the filter's `order`, `after` and `limit` are ignored: a default filter's 100 rows
    /// are not a cap), each audited with this admin's actor and `reason`, as a stored
    /// operation that [`resume`](Self::resume) continues after an error. The loop guard
    /// applies: a row already redriven [`DEFAULT_MAX_REDRIVES`] times is refused, like a cut
    /// payload or (named by id) a row in another status; the report lists the refusals.
    /// A canary, a rate, validation, a bound (`max`) or `force` need a [`BulkPlan`] and
    /// [`start`](Self::start).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, adapter::DeadReason, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload, Status};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// for n in 0..250 {
    ///     let failure = FailureInfo::new(ErrorClass::Permanent, "LedgerDown", "503".into(), vec![], None);
    ///     store.park(NewDeadLetter::new("payment", Payload::Json(n.into()), failure).dead(DeadReason::Permanent)).await?;
    /// }
    /// let admin = Admin::new(store.clone(), "alice");
    /// let report = admin.redrive(ListFilter::default().event_type("payment"), "ledger is back").await?;
    /// assert_eq!((report.moved, report.refused), (250, 0), "every matching row, not the first 100");
    /// assert_eq!(store.count(ListFilter::default().status(Status::Pending).limit(1_000)).await?, 250);
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`start`](Self::start) and [`Bulk::run`]: the store's error (the batch in flight is
    /// rolled back, the operation stays resumable).
    pub async fn redrive(&self, filter: ListFilter, reason: &str) -> Result<BulkReport, Error> {
        self.run_to_end(BulkPlan::redrive(filter, reason)).await
    }

    /// Discards every `PENDING` and `FAILED_PERMANENTLY` row `filter` selects (any other is
    /// refused, as [`refusal`](crate::store::refusal) says), to the last one: the shorthand of [`start`](Self::start)`(`[`BulkPlan::discard`]`(filter, reason))`
    /// run unpaced to its end, walking every matching row as [`redrive`](Self::redrive) does
    /// (the filter's `limit` is no cap), each audited with this admin's actor and `reason`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload, Status};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
    /// let admin = Admin::new(store.clone(), "alice");
    /// assert!(admin.discard(ListFilter::default().ids([id]), "").await.is_err(), "a discard needs a reason");
    /// let report = admin.discard(ListFilter::default().ids([id]), "test payment, not a customer's").await?;
    /// assert_eq!(report.moved_ids, [id]);
    /// let audit = store.audit(id).await?;
    /// assert_eq!((audit[0].actor.as_str(), audit[0].reason.as_deref()), ("alice", Some("test payment, not a customer's")));
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty reason; as [`redrive`](Self::redrive).
    pub async fn discard(&self, filter: ListFilter, reason: &str) -> Result<BulkReport, Error> {
        self.run_to_end(BulkPlan::discard(filter, reason)).await
    }

    async fn run_to_end(&self, plan: BulkPlan) -> Result<BulkReport, Error> {
        self.start(plan).await?.run(Pacing::default(), |_| std::ops::ControlFlow::Continue(())).await
    }

    /// How many rows [`purge`](Self::purge) would delete now.
    ///
    /// ```
    /// use std::{sync::Arc, time::Duration};
    /// use dlq_core::admin::Admin;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
    /// let id = store.park(NewDeadLetter::new("payment", Payload::Json(1.into()), failure)).await?.id;
    /// let admin = Admin::new(store, "alice");
    /// admin.discard(ListFilter::default().ids([id]), "duplicate").await?;
    /// assert_eq!(admin.purgeable(Duration::ZERO).await?, 1, "the discarded row");
    /// assert_eq!(admin.purgeable(Duration::from_secs(3600)).await?, 0, "not an hour old");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// The store's error.
    pub async fn purgeable(&self, older_than: Duration) -> Result<u64, Error> {
        self.store.count_purgeable(older_than).await
    }

    /// Deletes `SUCCEEDED` and `DISCARDED` rows last changed more than `older_than` ago.
    ///
    /// # Errors
    /// The store's error.
    pub async fn purge(&self, older_than: Duration) -> Result<u64, Error> {
        let purged = self.store.purge(older_than).await?;
        crate::observe::admin_action("purge", purged);
        Ok(purged)
    }
}

/// The rule for patches and undos: a `SUCCEEDED` row is left as its handler ran it (the
/// stores refuse it too, under their row lock).
fn not_succeeded(letter: &DeadLetter, action: &'static str) -> Result<(), Error> {
    if letter.status == crate::Status::Succeeded {
        return Err(Error::InvalidState { id: letter.id, status: letter.status, action, needs: NOT_SUCCEEDED });
    }
    Ok(())
}

/// What a patch or an undo needs of its row.
const NOT_SUCCEEDED: &str = "a row that has not succeeded (its handler ran with the payload it holds)";

/// Why undoing `audit_id` is refused: the patches of row `id` made after it, each on a line.
fn later_patches(audit_id: i64, id: DlqId, later: &[AuditEntry]) -> String {
    let mut why = format!(
        "undoing audit entry {audit_id} would also revert {} later patch{} of dead letter {id} \
         (undo the latest first, or force it: `dlq undo {audit_id} --force`):",
        later.len(),
        if later.len() == 1 { "" } else { "es" }
    );
    for a in later {
        let reason = a.reason.as_deref().unwrap_or("no reason");
        why.push_str(&format!("\n  audit entry {} by {} at {}: {reason}", a.id, a.actor, a.at.to_rfc3339()));
    }
    why
}

/// Why a validating action cannot run.
const NO_VALIDATION: &str = "validation needs the service's handlers (a registry) or a validator: \
     run it where they are linked (e.g. the CLI embedded with dlq_cli::Embedded)";

/// `reason`, trimmed, or an error saying `action` needs one.
fn required<'a>(reason: &'a str, action: &str) -> Result<&'a str, Error> {
    let reason = reason.trim();
    if reason.is_empty() {
        return Err(Error::Invalid(format!("{action} needs a reason (--reason): it is kept in the audit log")));
    }
    Ok(reason)
}

/// One page of [`Admin::select`]: the rows an operator's filter selects, as stored.
pub(crate) struct Selected {
    /// The rows the filter selects, as stored.
    pub(crate) rows: Vec<DeadLetter>,
    /// The last id the store listed (the cursor past this page, whether or not its row was
    /// selected).
    pub(crate) last: Option<DlqId>,
    /// Whether the store's page was full (there may be more).
    pub(crate) full: bool,
}

/// Every row a filter matches, oldest first, `size` at a time: each page starts after the last
/// id of the one before, so a walk sees each row once however many match.
struct Pages {
    filter: ListFilter,
    done: bool,
}

impl Pages {
    fn new(filter: ListFilter, size: usize) -> Self {
        Self { filter: filter.oldest_first().after(0).limit(size.max(1)), done: false }
    }

    /// The next page ([`Admin::select`]), `None` once the walk is over.
    async fn next(&mut self, admin: &Admin) -> Result<Option<Vec<DeadLetter>>, Error> {
        if self.done {
            return Ok(None);
        }
        let Selected { rows, last, full } = admin.select(&self.filter).await?;
        let Some(last) = last else { return Ok(None) };
        self.done = !full;
        self.filter = std::mem::take(&mut self.filter).after(last);
        Ok(Some(rows))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]

    use super::*;
    use crate::store::{ActionKind, BatchAction, Refused};
    use crate::{ErrorClass, MemoryStore, Status, classify::FailureInfo, record::DeadReason, store::NewDeadLetter};

    async fn dead_rows(store: &MemoryStore, n: u64) -> Vec<DlqId> {
        let failure = FailureInfo::new(ErrorClass::Permanent, "E", "bad".into(), vec![], None);
        let letters = (0..n).map(|i| {
            NewDeadLetter::new("payment", Payload::Json(i.into()), failure.clone()).dead(DeadReason::Permanent)
        });
        store.park_many(letters.collect()).await.unwrap().into_iter().map(|p| p.id).collect()
    }

    /// `Admin::redrive` walks every matching row (past `ListFilter`'s default limit of 100,
    /// where the store's old `redrive` stopped silently), audits the reason, and keeps the
    /// loop guard that the old one skipped.
    #[tokio::test]
    async fn redrive_takes_every_matching_row_with_the_loop_guard() {
        let store = Arc::new(MemoryStore::new());
        let rows = dead_rows(&store, 150).await;
        // Row 0 was redriven (and died again) as often as the loop guard allows.
        for _ in 0..bulk::DEFAULT_MAX_REDRIVES {
            let note = AuditNote::new("earlier", "tries");
            let batch =
                BatchAction { action: ActionKind::Redrive, ids: vec![rows[0]], note, max_redrives: None, step: None };
            assert_eq!(store.apply(batch).await.unwrap().moved, [rows[0]]);
            let lease = store
                .claim(crate::store::ClaimRequest {
                    event_types: vec!["payment".into()],
                    limit: 1,
                    lease: Duration::from_secs(60),
                    owner: "t".into(),
                })
                .await
                .unwrap()[0]
                .lease;
            let failure = FailureInfo::new(ErrorClass::Permanent, "E", "bad".into(), vec![], None);
            let dead = crate::store::Settlement::Dead { lease, reason: DeadReason::Permanent, failure, counts: true };
            assert_eq!(store.settle(vec![dead]).await.unwrap().applied, 1);
        }
        let admin = Admin::new(store.clone(), "alice");
        let report = admin.redrive(ListFilter::default(), "ledger is back").await.unwrap();
        assert_eq!((report.moved, report.refused), (149, 1));
        assert_eq!(report.refusals[0].id, rows[0]);
        assert_eq!(report.refusals[0].why, Refused::RedriveLimit { count: bulk::DEFAULT_MAX_REDRIVES });
        assert_eq!(store.get_now(rows[0]).unwrap().status, Status::FailedPermanently);
        let last = store.get_now(rows[149]).unwrap();
        assert_eq!((last.status, last.redrive_count), (Status::Pending, 1));
        let audit = store.audit(rows[149]).await.unwrap();
        assert_eq!((audit[0].actor.as_str(), audit[0].reason.as_deref()), ("alice", Some("ledger is back")));
    }

    /// `Admin::discard` takes every matching row too, and needs a reason.
    #[tokio::test]
    async fn discard_takes_every_matching_row_and_needs_a_reason() {
        let store = Arc::new(MemoryStore::new());
        dead_rows(&store, 120).await;
        let admin = Admin::new(store.clone(), "bob");
        let err = admin.discard(ListFilter::default(), " ").await.unwrap_err();
        assert!(err.to_string().contains("discard needs a reason"), "{err}");
        let report = admin.discard(ListFilter::default().event_type("payment"), "test data").await.unwrap();
        assert_eq!(report.moved, 120);
        let discarded = ListFilter::default().status(Status::Discarded).limit(1_000);
        assert_eq!(store.count(discarded).await.unwrap(), 120);
    }
}
