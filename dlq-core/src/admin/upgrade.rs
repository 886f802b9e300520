//! `dlq upgrade`: the rows of an event type parked in an older version of its contract,
//! rewritten in its handler's version through the handler's upcasters, each audited.

use crate::Error;
use crate::record::{DlqId, ListFilter, Status};
use crate::upcast::VersionUpgrade;

use super::{Admin, required};

/// Rows read per page while walking an event type's rows.
const PAGE: usize = 500;

/// What [`Admin::upgrade`] did, or would do in a dry run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpgradeReport {
    /// The handler's version, which the rows are rewritten in.
    pub to: u32,
    /// The rows rewritten (or that would be), with the version each was in.
    pub upgraded: Vec<(DlqId, u32)>,
    /// The rows left as they are, with the reason: an upcaster failed, the row is newer than
    /// the handler (a rollback), or it changed meanwhile.
    pub refused: Vec<(DlqId, String)>,
    /// Nothing was written.
    pub dry_run: bool,
}

impl Admin {
    /// Rewrites every `PENDING` and `FAILED_PERMANENTLY` row of `event_type` parked in an older
    /// version than its handler's, upcast through the handler's chain, each audited (action
    /// `upgrade`) with `reason`. A row whose upcast fails is left as it is and reported. With
    /// `dry_run`, upcasts without writing. Needs the registry: only the service's own binary
    /// links its upcasters.
    ///
    /// A retrier upcasts rows on its own when it retries them; this rewrites the stored rows
    /// at once, so that the console, `dlq show` and `dlq patch` work on the current version.
    ///
    /// ```
    /// use dlq_core::admin::Admin;
    /// use dlq_core::store::NewDeadLetter;
    /// use dlq_core::{store::prelude::*, ErrorClass, classify::FailureInfo, MemoryStore, Payload, handlers::UpcastError};
    /// use serde_json::{json, Value};
    /// use std::sync::Arc;
    ///
    /// fn add_currency(mut v: Value) -> Result<Value, UpcastError> {
    ///     v["currency"] = json!("EUR");
    ///     Ok(v)
    /// }
    ///
    /// #[derive(serde::Serialize, serde::Deserialize)]
    /// struct Payment { cents: i64, currency: String }
    ///
    /// #[dlq_core::dead_letter(event_type = "doc-upgrade", version = 2, upcast = [add_currency])]
    /// async fn handle(p: Payment) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Transient, "io", "down".into(), vec![], None);
    /// let id = store.park(NewDeadLetter::new("doc-upgrade", Payload::Json(json!({"cents": 5})), failure)).await?.id;
    /// let admin = Admin::new(store.clone(), "alice").with_registry(dlq_core::handlers![handle]?);
    /// let report = admin.upgrade("doc-upgrade", "before the v1 structs are deleted", false).await?;
    /// assert_eq!((report.to, report.upgraded), (2, vec![(id, 1)]));
    /// let row = store.get(id).await?.unwrap();
    /// assert_eq!((row.version, row.payload), (2, Payload::Json(json!({"cents": 5, "currency": "EUR"}))));
    /// assert_eq!(store.audit(id).await?[0].action, "upgrade");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for an empty reason or without a registry;
    /// [`Error::UnknownEventType`] for a type without a handler; the store's error.
    pub async fn upgrade(&self, event_type: &str, reason: &str, dry_run: bool) -> Result<UpgradeReport, Error> {
        let reason = required(reason, "upgrade")?;
        let Some(registry) = &self.registry else {
            return Err(Error::Invalid(
                "upgrade needs the service's handlers and their upcasters: run the CLI embedded in the service's binary (dlq_cli::Embedded)"
                    .into(),
            ));
        };
        let reg = registry.get(event_type)?;
        let mut report = UpgradeReport { to: reg.version(), dry_run, ..UpgradeReport::default() };
        for status in [Status::FailedPermanently, Status::Pending] {
            let mut filter = ListFilter {
                status: Some(status),
                event_type: Some(event_type.to_owned()),
                limit: PAGE,
                ..ListFilter::default()
            };
            loop {
                let page = self.store.list(filter.clone()).await?;
                let Some(last) = page.last() else { break };
                filter.after = Some(last.id);
                for row in page.into_iter().filter(|row| row.version < report.to) {
                    let payload = match reg.upcast(row.version, row.payload) {
                        Ok(payload) => payload,
                        Err(why) => {
                            report.refused.push((row.id, why));
                            continue;
                        }
                    };
                    if !dry_run {
                        let note = self.note(Some(reason));
                        let upgrade = VersionUpgrade { id: row.id, from: row.version, to: report.to, payload, note };
                        if let Err(error) = self.store.upgrade(upgrade).await {
                            match error {
                                Error::VersionChanged { .. } | Error::InvalidState { .. } => {
                                    report.refused.push((row.id, error.to_string()));
                                    continue;
                                }
                                error => return Err(error),
                            }
                        }
                    }
                    report.upgraded.push((row.id, row.version));
                }
            }
        }
        if !dry_run {
            crate::observe::admin_action("upgrade", report.upgraded.len() as u64);
        }
        Ok(report)
    }
}
