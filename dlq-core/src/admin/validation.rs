//! `dlq redrive --validate`'s counts: how the rows of a selection would decode, per failure
//! group, before any row moves.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Admin, Pages};
use crate::Error;
use crate::catalog::Verdict;
use crate::record::{DeadLetter, DlqId, ListFilter};

/// How the rows of one failure group would decode ([`Admin::validation`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GroupValidation {
    /// The group's event type.
    pub event_type: String,
    /// The group's fingerprint.
    pub fingerprint: String,
    /// Rows whose version is the handler's and whose payload decodes as it is.
    pub as_is: u64,
    /// Rows of an older version that decode after upcasting.
    pub after_upcast: u64,
    /// Rows of a version the handler takes whose payload could not be checked (no schema, or
    /// encrypted without the key): not refused.
    pub unchecked: u64,
    /// Rows that would not decode.
    pub not: u64,
    /// The first row that would not decode, and why.
    pub first_error: Option<(DlqId, String)>,
    /// The first row that could not be checked, and why.
    pub first_unchecked: Option<(DlqId, String)>,
}

/// How the rows of a selection would decode, per failure group ([`Admin::validation`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ValidationReport {
    /// By event type and fingerprint.
    pub groups: Vec<GroupValidation>,
    /// Rows checked.
    pub checked: u64,
    /// Whether the walk stopped at its bound with rows left unchecked.
    pub bounded: bool,
    /// Versions of the selection's event types that the type catalog has seen published
    /// with an event of another shape than their first ([`Catalog::mismatches`]): a process
    /// that changed its event without bumping its version, whose retrier would fail rows
    /// that pass here.
    ///
    /// [`Catalog::mismatches`]: crate::catalog::Catalog::mismatches
    pub mismatches: Vec<crate::catalog::SchemaMismatch>,
}

impl ValidationReport {
    /// Rows that would not decode.
    pub fn failing(&self) -> u64 {
        self.groups.iter().map(|g| g.not).sum()
    }

    /// Whether every checked row would decode (or could not be checked), and no version of
    /// the selection's types was published with two shapes.
    pub fn passes(&self) -> bool {
        self.failing() == 0 && self.mismatches.is_empty()
    }

    /// Counts `row` as `verdict` says.
    fn add(&mut self, groups: &mut BTreeMap<(String, String), GroupValidation>, row: &DeadLetter, verdict: Verdict) {
        self.checked += 1;
        let key = (row.event_type.clone(), row.failure.fingerprint.clone());
        let group = groups.entry(key).or_insert_with(|| GroupValidation {
            event_type: row.event_type.clone(),
            fingerprint: row.failure.fingerprint.clone(),
            ..GroupValidation::default()
        });
        match verdict {
            Verdict::AsIs => group.as_is += 1,
            Verdict::AfterUpcast { .. } => group.after_upcast += 1,
            Verdict::Unchecked(why) => {
                group.unchecked += 1;
                group.first_unchecked.get_or_insert((row.id, why));
            }
            Verdict::Not(why) => {
                group.not += 1;
                group.first_error.get_or_insert((row.id, why));
            }
        }
    }
}

/// The rows of a selection that would not decode ([`Admin::undecodable`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Undecodable {
    /// The rows that would not decode, in the filter's order, each with why.
    pub rows: Vec<(DeadLetter, String)>,
    /// Rows checked.
    pub checked: u64,
    /// Where to go on (`ListFilter::after`) when the walk stopped with rows left: `limit`
    /// rows found, or `max_rows` checked.
    pub next: Option<DlqId>,
}

impl Admin {
    /// How `letter` would decode: with a registry, by the real decode (upcast from the row's
    /// version, then deserialized into the handler's event type); otherwise by the store's type
    /// catalog ([`with_catalog`](Self::with_catalog)). An encrypted payload is opened in memory
    /// when this admin holds the key, and is [`Verdict::Unchecked`] otherwise.
    pub fn verdict(&self, letter: &DeadLetter) -> Verdict {
        let opened = self.opened_for_check(&letter.event_type, &letter.payload);
        if let Some(registry) = &self.registry {
            let reg = match registry.get(&letter.event_type) {
                Ok(reg) => reg,
                Err(e) => return Verdict::Not(e.to_string()),
            };
            let Some(payload) = opened else {
                return Verdict::Unchecked("encrypted, and no key here to open it (set DLQ_KEYS)".to_owned());
            };
            let upcast = letter.version < reg.version();
            return match reg.upcast(letter.version, payload).and_then(|p| reg.check_payload(&p)) {
                Ok(()) if upcast => Verdict::AfterUpcast { checked: true },
                Ok(()) => Verdict::AsIs,
                Err(why) => Verdict::Not(why),
            };
        }
        match &self.catalog {
            Some(catalog) => catalog.verdict(&letter.event_type, letter.version, opened.as_ref()),
            None => Verdict::Unchecked("no registry and no type catalog to check it by".to_owned()),
        }
    }

    /// This admin, judging rows by the store's type catalog when it has no handlers: the
    /// catalog read now, kept when it holds a type (a binary without the handlers, such as the
    /// stock `dlq` and its console, checks by what the retriers published).
    ///
    /// # Errors
    /// The store's.
    pub async fn with_store_catalog(self) -> Result<Self, Error> {
        if self.registry.is_some() {
            return Ok(self);
        }
        let catalog = crate::catalog::Catalog::read(&*self.store).await?;
        Ok(if catalog.is_empty() { self } else { self.with_catalog(catalog) })
    }

    /// Whether it judges rows by the handlers or a type catalog ([`verdict`](Self::verdict)).
    pub const fn can_judge(&self) -> bool {
        self.registry.is_some() || self.catalog.is_some()
    }

    /// The rows `filter` selects (in its order, from its `after`) that would not decode by
    /// [`verdict`](Self::verdict): at most `filter.limit` of them, checking at most `max_rows`
    /// rows (`dlq ls --undecodable`).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::admin::Admin;
    /// use dlq_core::catalog::{Catalog, EventTypeInfo};
    /// use dlq_core::{store::prelude::*, adapter::DeadReason, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
    /// for version in [1, 2, 3, 1] {
    ///     let letter = NewDeadLetter::new("payment", Payload::Json(1.into()), failure.clone()).dead(DeadReason::Permanent);
    ///     store.park(letter.with_version(version)).await?;
    /// }
    /// let admin = Admin::new(store, "alice").with_catalog(Catalog::new(vec![EventTypeInfo::new("payment", 2, "pod-1")]));
    /// let found = admin.undecodable(ListFilter::default().oldest_first().limit(2), 1_000).await?;
    /// let versions: Vec<u32> = found.rows.iter().map(|(row, _)| row.version).collect();
    /// assert_eq!((versions, found.checked), (vec![1, 3], 3), "version 1 is below the chain, 3 ahead");
    /// assert_eq!(found.next, Some(found.rows[1].0.id), "two found: go on after the second");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// The store's.
    pub async fn undecodable(&self, filter: ListFilter, max_rows: u64) -> Result<Undecodable, Error> {
        let want = filter.limit.max(1);
        let mut found = Undecodable::default();
        let mut page = filter.limit(500);
        let policy = self.redaction().await?;
        loop {
            let super::Selected { rows, last, full } = self.select(&page).await?;
            for row in rows {
                if found.checked >= max_rows || found.rows.len() >= want {
                    return Ok(found);
                }
                found.checked += 1;
                found.next = Some(row.id);
                if let Verdict::Not(why) = self.verdict(&row) {
                    // Shown as every row is: masked, and the verdict (which may quote the
                    // payload's values) scrubbed of what the row's type redacts.
                    let why = policy.scrub(&row.event_type, &[&row.payload], &why).into_owned();
                    found.rows.push((self.shown_row(&policy, row).await?, why));
                }
            }
            match last {
                Some(last) if full => {
                    found.next = Some(last);
                    page = page.after(last);
                }
                _ => {
                    found.next = None;
                    return Ok(found);
                }
            }
        }
    }

    /// How the rows `filter` selects would decode, per failure group, checking at most
    /// `max_rows` of them (`bounded` says when rows were left): `dlq redrive --validate`'s
    /// counts, taken before any row moves, and the console's.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use dlq_core::admin::Admin;
    /// use dlq_core::catalog::{Catalog, EventTypeInfo};
    /// use dlq_core::{store::prelude::*, adapter::DeadReason, ErrorClass, classify::FailureInfo, ListFilter, MemoryStore, store::NewDeadLetter, Payload};
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = Arc::new(MemoryStore::new());
    /// let failure = FailureInfo::new(ErrorClass::Permanent, "io", "bad".into(), vec![], None);
    /// for version in [1, 2, 3] {
    ///     let letter = NewDeadLetter::new("payment", Payload::Json(1.into()), failure.clone()).dead(DeadReason::Permanent);
    ///     store.park(letter.with_version(version)).await?;
    /// }
    /// let mut info = EventTypeInfo::new("payment", 2, "pod-1");
    /// info.upcast_from = 1;
    /// let admin = Admin::new(store, "alice").with_catalog(Catalog::new(vec![info]));
    /// let report = admin.validation(ListFilter::default(), 1_000).await?;
    /// let group = &report.groups[0];
    /// assert_eq!((group.unchecked, group.after_upcast, group.not), (1, 1, 1), "no schema; upcast; version 3 is ahead");
    /// assert!(!report.passes());
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    ///
    /// # Errors
    /// The store's.
    pub async fn validation(&self, filter: ListFilter, max_rows: u64) -> Result<ValidationReport, Error> {
        let mut report = ValidationReport::default();
        if let Some(catalog) = &self.catalog {
            let of_selection =
                |m: &crate::catalog::SchemaMismatch| filter.event_type.as_ref().is_none_or(|t| *t == m.event_type);
            report.mismatches = catalog.mismatches().into_iter().filter(of_selection).collect();
        }
        let mut groups = BTreeMap::new();
        let mut pages = Pages::new(filter, 500);
        let policy = self.redaction().await?;
        'walk: while let Some(rows) = pages.next(self).await? {
            for row in &rows {
                if report.checked >= max_rows {
                    report.bounded = true;
                    break 'walk;
                }
                let verdict =
                    self.verdict(row).map_text(|why| policy.scrub(&row.event_type, &[&row.payload], &why).into_owned());
                report.add(&mut groups, row, verdict);
            }
        }
        report.groups = groups.into_values().collect();
        report
            .groups
            .sort_by(|a, b| b.not.cmp(&a.not).then((b.as_is + b.after_upcast).cmp(&(a.as_is + a.after_upcast))));
        Ok(report)
    }
}
