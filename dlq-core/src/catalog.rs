//! The type catalog: what the processes that handle each event type say about it, kept in the
//! store so that tools without the handlers' code (the stock `dlq` binary, the console) can
//! check stored payloads.
//!
//! Every [`Retrier`](crate::Retrier) publishes one [`EventTypeInfo`] per registered type when
//! it starts ([`Registry::catalog`](crate::Registry::catalog),
//! [`DeadLetterStore::publish_types`]); a process that only dispatches can publish with
//! [`Registry::publish`](crate::Registry::publish). The store keeps one record per event type,
//! and the **newest version wins**: during a rolling deploy, a process still on version 1 that
//! starts after one on version 2 does not overwrite version 2's record (an equal version
//! refreshes the record).
//!
//! An event type that implements `schemars::JsonSchema` (derive it through the re-export
//! `dlq_core::schemars`) publishes its JSON Schema, and an upcaster's input type that does
//! publishes its version's: tools then check each stored payload against its own version's
//! schema ([`Catalog::verdict`]). Deriving it is optional: a type without it publishes no
//! schema, and tools check only its rows' versions.
//!
//! ```
//! use dlq_core::catalog::{Catalog, Verdict};
//! use dlq_core::schemars::JsonSchema;
//! use dlq_core::{Payload, UpcastError};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, JsonSchema)]
//! #[schemars(crate = "dlq_core::schemars")]
//! struct PaymentV1 { cents: u64 }
//!
//! #[derive(Serialize, Deserialize, JsonSchema)]
//! #[schemars(crate = "dlq_core::schemars")]
//! struct Payment { cents: u64, currency: String }
//!
//! fn v1_to_v2(old: PaymentV1) -> Result<Payment, UpcastError> {
//!     Ok(Payment { cents: old.cents, currency: "EUR".to_owned() })
//! }
//!
//! #[dlq_core::dead_letter(event_type = "doc-schema", version = 2, upcast = [v1_to_v2])]
//! async fn handle(payment: Payment) -> Result<(), std::io::Error> { Ok(()) }
//!
//! #[derive(Serialize, Deserialize)]
//! struct Refund { cents: u64 }
//!
//! #[dlq_core::dead_letter(event_type = "doc-no-schema")]
//! async fn refund(refund: Refund) -> Result<(), std::io::Error> { Ok(()) }
//!
//! let records = dlq_core::handlers![handle, refund].unwrap().catalog("pod-1");
//! let catalog = Catalog::new(records);
//! let with = catalog.get("doc-schema").unwrap();
//! assert!(with.schema.is_some() && with.older_schemas.contains_key(&1));
//! assert!(catalog.get("doc-no-schema").unwrap().schema.is_none(), "deriving it is optional");
//!
//! let v1 = Payload::Json(serde_json::json!({"cents": 5}));
//! assert_eq!(catalog.verdict("doc-schema", 1, Some(&v1)), Verdict::AfterUpcast { checked: true });
//! assert!(catalog.verdict("doc-schema", 2, Some(&v1)).fails(), "version 2 has a currency");
//! assert!(matches!(catalog.verdict("doc-no-schema", 1, Some(&v1)), Verdict::Unchecked(_)));
//! ```

use std::collections::BTreeMap;

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::DeadLetterStore;
use crate::handler::Registration;
pub use crate::validate::{SchemaError, validate};

/// What the processes handling one event type publish about it into the store's catalog
/// ([`DeadLetterStore::publish_types`], read back by [`DeadLetterStore::event_types`]).
///
/// ```
/// use dlq_core::catalog::EventTypeInfo;
///
/// let info = EventTypeInfo::new("payment", 3, "host:42:ab12");
/// assert_eq!((info.version, info.upcast_from, info.encrypted), (3, 3, false));
/// assert!(info.schema.is_none() && info.redact.is_empty());
/// let newer = EventTypeInfo::new("payment", 4, "host:43:cd34");
/// assert!(newer.replaces(&info) && !info.replaces(&newer), "the newest version wins");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EventTypeInfo {
    /// The event type.
    pub event_type: String,
    /// The version of the event's contract its handler decodes (`#[dead_letter(version = N)]`).
    pub version: u32,
    /// The JSON Schema of the handler's event type in `version`, when the type implements
    /// `schemars::JsonSchema`; `None` otherwise (then tools check only versions, not shapes).
    pub schema: Option<Value>,
    /// The JSON Schemas of older versions, by version, for the upcasters whose input type
    /// implements `schemars::JsonSchema`: an old row is checked against its own version's.
    #[serde(default)]
    pub older_schemas: BTreeMap<u32, Value>,
    /// The oldest version the handler's chain upcasts from: 1 when the chain is whole. A row
    /// of an older version cannot be decoded.
    pub upcast_from: u32,
    /// Whether its payloads are encrypted at rest (`encrypt = true`).
    pub encrypted: bool,
    /// JSON pointers of the payload fields shown redacted.
    #[serde(default)]
    pub redact: Vec<String>,
    /// When it was published (whole microseconds, as every store keeps time).
    pub published_at: DateTime<Utc>,
    /// Who published it: the retrier's owner name (`host:pid:...`) or the process's.
    pub published_by: String,
}

impl EventTypeInfo {
    /// The record of a type in `version` whose chain upcasts nothing (`upcast_from` is
    /// `version`), without a schema, published now by `published_by`.
    pub fn new(event_type: impl Into<String>, version: u32, published_by: impl Into<String>) -> Self {
        Self {
            event_type: event_type.into(),
            version,
            schema: None,
            older_schemas: BTreeMap::new(),
            upcast_from: version,
            encrypted: false,
            redact: Vec::new(),
            published_at: Utc::now().trunc_subsecs(6),
            published_by: published_by.into(),
        }
    }

    /// What `reg` says about its type.
    pub fn of(reg: &Registration, published_by: &str) -> Self {
        let links = u32::try_from(reg.upcast.len()).unwrap_or(u32::MAX);
        let (schema, older_schemas) = reg.schemas.map_or_else(|| (None, BTreeMap::new()), |f| f().split(reg.version));
        Self {
            schema,
            older_schemas,
            upcast_from: reg.version.saturating_sub(links).max(1),
            encrypted: reg.sealing.is_some(),
            redact: reg.redact.iter().map(|p| (*p).to_owned()).collect(),
            ..Self::new(reg.event_type, reg.version, published_by)
        }
    }

    /// Whether this record replaces `stored` in the catalog: when its version is the same or
    /// newer (the newest version wins; the same version refreshes the record).
    pub fn replaces(&self, stored: &Self) -> bool {
        self.version >= stored.version
    }

    /// The schema rows of `version` are checked against: the current one's for `version`,
    /// an older one's from [`older_schemas`](Self::older_schemas), `None` when unknown.
    pub fn schema_of(&self, version: u32) -> Option<&Value> {
        if version == self.version { self.schema.as_ref() } else { self.older_schemas.get(&version) }
    }
}

/// How a stored row would decode, as far as the catalog (or, in a binary with the handlers,
/// the real decode) can tell without running its handler.
///
/// ```
/// use dlq_core::catalog::{Catalog, EventTypeInfo, Verdict};
/// use dlq_core::Payload;
/// use serde_json::json;
///
/// let mut info = EventTypeInfo::new("payment", 2, "pod-1");
/// info.upcast_from = 1;
/// info.schema = Some(json!({"type": "object", "required": ["currency"]}));
/// let catalog = Catalog::new(vec![info]);
/// let v2 = Payload::Json(json!({"currency": "EUR"}));
/// assert_eq!(catalog.verdict("payment", 2, Some(&v2)), Verdict::AsIs);
/// assert!(matches!(catalog.verdict("payment", 1, Some(&v2)), Verdict::AfterUpcast { checked: false }));
/// assert!(matches!(catalog.verdict("payment", 3, Some(&v2)), Verdict::Not(_)), "a version ahead");
/// assert!(matches!(catalog.verdict("payment", 2, Some(&Payload::Json(json!({})))), Verdict::Not(_)));
/// assert!(matches!(catalog.verdict("refund", 1, Some(&v2)), Verdict::Not(_)), "a type not in the catalog");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "why", rename_all = "snake_case")]
pub enum Verdict {
    /// The row's version is the handler's and its payload decodes as it is (matches the
    /// version's schema).
    AsIs,
    /// An older version the handler's chain upcasts from; `checked` when the payload matched
    /// its own version's schema (false when that version's schema is unknown).
    AfterUpcast {
        /// Whether the payload was checked against its version's schema.
        checked: bool,
    },
    /// The version is one the handler takes, but the payload could not be checked: why (no
    /// schema exported, an encrypted payload without the key, a schema the validator cannot
    /// check).
    Unchecked(String),
    /// It would not decode: why.
    Not(String),
}

impl Verdict {
    /// The same verdict with its text (why) passed through `shown`: what an operator is
    /// shown of it (the admin layer scrubs the values a type redacts out of it).
    #[must_use]
    pub fn map_text(self, shown: impl FnOnce(String) -> String) -> Self {
        match self {
            Self::Unchecked(why) => Self::Unchecked(shown(why)),
            Self::Not(why) => Self::Not(shown(why)),
            other => other,
        }
    }

    /// Whether the row would not decode.
    pub const fn fails(&self) -> bool {
        matches!(self, Self::Not(_))
    }
}

/// The type catalog as read from a store ([`DeadLetterStore::event_types`]), to judge rows by.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    by_type: BTreeMap<String, EventTypeInfo>,
}

impl Catalog {
    /// The catalog of these records.
    pub fn new(records: Vec<EventTypeInfo>) -> Self {
        Self { by_type: records.into_iter().map(|info| (info.event_type.clone(), info)).collect() }
    }

    /// The catalog `store` holds.
    ///
    /// # Errors
    /// The store's.
    pub async fn read<S: DeadLetterStore + ?Sized>(store: &S) -> Result<Self, crate::Error> {
        Ok(Self::new(store.event_types().await?))
    }

    /// The record of `event_type`.
    pub fn get(&self, event_type: &str) -> Option<&EventTypeInfo> {
        self.by_type.get(event_type)
    }

    /// Whether it holds no type.
    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }

    /// How a row of `event_type` in `version` would decode: `payload` is the row's payload in
    /// clear, `None` when it is encrypted and cannot be opened here.
    pub fn verdict(&self, event_type: &str, version: u32, payload: Option<&crate::Payload>) -> Verdict {
        let Some(info) = self.get(event_type) else {
            return Verdict::Not(format!(
                "event type `{event_type}` is not in the store's type catalog: no process handling it has published it (a retrier does when it starts)"
            ));
        };
        if let Some(not) = version_refusal(info, version) {
            return Verdict::Not(not);
        }
        let Some(payload) = payload else {
            return Verdict::Unchecked("encrypted, and no key here to open it (set DLQ_KEYS)".to_owned());
        };
        let upcast = version < info.version;
        let Some(schema) = info.schema_of(version) else {
            return if upcast {
                Verdict::AfterUpcast { checked: false }
            } else {
                Verdict::Unchecked(format!("`{event_type}` exports no JSON Schema for version {version}"))
            };
        };
        let value = match payload_json(payload) {
            Ok(value) => value,
            Err(not) => return Verdict::Not(not),
        };
        match (validate(schema, &value), upcast) {
            (Ok(()), false) => Verdict::AsIs,
            (Ok(()), true) => Verdict::AfterUpcast { checked: true },
            (Err(SchemaError::Invalid(why)), _) => {
                Verdict::Not(format!("does not match version {version}'s schema: {why}"))
            }
            (Err(e @ SchemaError::Unsupported(_)), _) => Verdict::Unchecked(e.to_string()),
        }
    }
}

/// Why a row of `version` cannot reach the handler's version: ahead of it, or older than its
/// chain reaches.
pub(crate) fn version_refusal(info: &EventTypeInfo, version: u32) -> Option<String> {
    let (current, from) = (info.version, info.upcast_from);
    if version > current {
        Some(format!(
            "version {version} is newer than version {current} that `{}`'s handler decodes (a rollback?)",
            info.event_type
        ))
    } else if version < from {
        Some(format!(
            "version {version} is older than version {from}, the oldest `{}`'s upcast chain reaches",
            info.event_type
        ))
    } else {
        None
    }
}

/// The payload as JSON, or why it is not.
fn payload_json(payload: &crate::Payload) -> Result<Value, String> {
    if payload.is_truncated() {
        return Err("the payload was cut (too large) when it was parked".to_owned());
    }
    match payload {
        crate::Payload::Json(value) => Ok(value.clone()),
        crate::Payload::Raw { bytes, .. } => {
            serde_json::from_slice(bytes).map_err(|e| format!("the payload is not JSON: {e}"))
        }
    }
}

/// The JSON Schemas one handler exports, by version (what `#[dead_letter]` generates).
#[doc(hidden)]
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schemas(pub BTreeMap<u32, Value>);

impl Schemas {
    /// The current version's schema and the older ones.
    fn split(mut self, current: u32) -> (Option<Value>, BTreeMap<u32, Value>) {
        let schema = self.0.remove(&current);
        self.0.retain(|v, _| *v < current);
        (schema, self.0)
    }
}

/// Keeps in `catalog` the records of `published` that [replace](EventTypeInfo::replaces) the
/// stored one of their type (or add a type): what [`DeadLetterStore::publish_types`] does, for
/// stores that keep the catalog in memory.
///
/// ```
/// use dlq_core::catalog::{EventTypeInfo, merge};
///
/// let mut catalog = vec![EventTypeInfo::new("payment", 2, "new-pod")];
/// merge(&mut catalog, vec![EventTypeInfo::new("payment", 1, "old-pod"), EventTypeInfo::new("refund", 1, "old-pod")]);
/// assert_eq!(catalog.iter().map(|i| (i.event_type.as_str(), i.version)).collect::<Vec<_>>(), [("payment", 2), ("refund", 1)]);
/// ```
pub fn merge(catalog: &mut Vec<EventTypeInfo>, published: Vec<EventTypeInfo>) {
    for info in published {
        match catalog.iter_mut().find(|stored| stored.event_type == info.event_type) {
            Some(stored) if info.replaces(stored) => *stored = info,
            Some(_) => {}
            None => catalog.push(info),
        }
    }
    catalog.sort_by(|a, b| a.event_type.cmp(&b.event_type));
}

/// Publishes `records` into `store`'s catalog, logging (not failing) when the store cannot take
/// them: the process handles events without the catalog; tools then report the types as
/// unknown. Says whether it was published.
pub(crate) async fn publish_or_warn<S: DeadLetterStore + ?Sized>(store: &S, records: Vec<EventTypeInfo>) -> bool {
    if records.is_empty() {
        return true;
    }
    match store.publish_types(records).await {
        Ok(()) => true,
        Err(error) => {
            tracing::warn!(%error, "could not publish the event types into the store's catalog; will try again");
            false
        }
    }
}

/// Publishes `reg`'s record ([`EventTypeInfo::of`]) into `store` unless this process already
/// has (once per store and type): what the live path and a [`Dispatcher`](crate::Dispatcher)
/// do before their first park of a type, so that the operator tools know from the first row
/// what the type redacts, seals and decodes. A store that cannot take it now is tried again
/// at the next park; the park itself goes on (a park never waits on the catalog).
pub(crate) async fn publish_once<S: DeadLetterStore + ?Sized>(store: &S, reg: &crate::Registration) {
    type Published = std::sync::Mutex<std::collections::HashSet<(crate::store::StoreId, &'static str)>>;
    static PUBLISHED: std::sync::OnceLock<Published> = std::sync::OnceLock::new();
    let published = PUBLISHED.get_or_init(Published::default);
    let key = (store.store_id(), reg.event_type);
    if published.lock().is_ok_and(|set| set.contains(&key)) {
        return;
    }
    let owner = format!("{}:{}:live", crate::record::host_name(), std::process::id());
    let done = match store.publish_types(vec![EventTypeInfo::of(reg, &owner)]).await {
        // A store without a catalog: nothing to publish, now or later.
        Ok(()) | Err(crate::Error::Unsupported { .. }) => true,
        Err(error) => {
            tracing::warn!(%error, event_type = reg.event_type, "could not publish the event type into the store's catalog; will try again at its next park");
            false
        }
    };
    if done {
        if let Ok(mut set) = published.lock() {
            set.insert(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_version_wins_and_an_equal_one_refreshes() {
        let mut catalog = Vec::new();
        merge(&mut catalog, vec![EventTypeInfo::new("payment", 2, "a")]);
        merge(&mut catalog, vec![EventTypeInfo::new("payment", 1, "b")]);
        assert_eq!((catalog[0].version, catalog[0].published_by.as_str()), (2, "a"), "an older process keeps out");
        merge(&mut catalog, vec![EventTypeInfo::new("payment", 2, "c")]);
        assert_eq!(catalog[0].published_by, "c", "the same version refreshes");
        merge(&mut catalog, vec![EventTypeInfo::new("payment", 3, "d")]);
        assert_eq!((catalog.len(), catalog[0].version), (1, 3));
    }

    #[test]
    fn a_registration_publishes_its_chain_and_sealing() {
        static V3: Registration =
            Registration { upcast: &[crate::unchanged, crate::unchanged], ..crate::handler::for_tests("payment", 3) };
        let info = EventTypeInfo::of(&V3, "me");
        assert_eq!((info.version, info.upcast_from, info.encrypted), (3, 1, false));
        assert_eq!(info.published_by, "me");
        let current = serde_json::json!({"type": "object"});
        let (schema, older) = Schemas([(1, Value::Null), (3, current.clone()), (4, Value::Null)].into()).split(3);
        assert_eq!((schema, older.keys().copied().collect::<Vec<_>>()), (Some(current), vec![1]));
    }
}
