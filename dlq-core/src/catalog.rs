//! The type catalog: what the processes that handle each event type say about it, kept in the
//! store so that tools without the handlers' code (the stock `dlq` binary, the console) can
//! check stored payloads.
//!
//! Every [`Retrier`](crate::Retrier) publishes one [`EventTypeInfo`] per registered type when
//! it starts ([`Registry::catalog`](crate::handlers::Registry::catalog),
//! `FleetStore::publish_types`); a process that only dispatches can publish with
//! [`Registry::publish`](crate::handlers::Registry::publish). The store keeps one record per event type,
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
//! use dlq_core::{Payload, handlers::UpcastError};
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

pub use crate::error::SchemaMismatch;
use crate::handler::Registration;
pub use crate::validate::{SchemaError, validate};

/// What the processes handling one event type publish about it into the store's catalog
/// (`FleetStore::publish_types`, read back by `FleetStore::event_types`).
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
    ///
    /// ```
    /// use dlq_core::catalog::Verdict;
    /// let shown = Verdict::Not("found 4111".into()).map_text(|why| why.replace("4111", "[redacted]"));
    /// assert_eq!(shown, Verdict::Not("found [redacted]".into()));
    /// assert_eq!(Verdict::AsIs.map_text(|_| unreachable!()), Verdict::AsIs);
    /// ```
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

/// The type catalog as read from a store (`FleetStore::event_types`), to judge rows by,
/// with the schemas each version was published with (`FleetStore::version_schemas`).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    by_type: BTreeMap<String, EventTypeInfo>,
    schemas: Vec<VersionSchema>,
}

impl Catalog {
    /// The catalog of these records.
    pub fn new(records: Vec<EventTypeInfo>) -> Self {
        Self { by_type: records.into_iter().map(|info| (info.event_type.clone(), info)).collect(), schemas: Vec::new() }
    }

    /// The same catalog, with the schemas each version was published with (for
    /// [`mismatches`](Self::mismatches)).
    #[must_use]
    pub fn with_schemas(mut self, schemas: Vec<VersionSchema>) -> Self {
        self.schemas = schemas;
        self
    }

    /// The versions published with an event of another shape than the one they were first
    /// published with, since the type's newest record was last published: a process that
    /// changed its event without bumping its version (`#[dead_letter(version = N)]`) and
    /// still runs. One per type and version (the latest such publication), by type.
    ///
    /// ```
    /// use dlq_core::catalog::{Catalog, EventTypeInfo, VersionSchema};
    /// use serde_json::json;
    ///
    /// let v1 = VersionSchema::new("payment", 1, json!({"required": ["cents"]}), "payments-v1");
    /// let v2 = EventTypeInfo::new("payment", 2, "payments-v2");
    /// let forgot = VersionSchema::new("payment", 1, json!({"required": ["amount_cents"]}), "payments-v3");
    /// let catalog = Catalog::new(vec![v2]).with_schemas(vec![v1, forgot]);
    /// let found = catalog.mismatches();
    /// assert_eq!((found[0].version, found[0].newest, found[0].differing_by.as_str()), (1, 2, "payments-v3"));
    /// ```
    pub fn mismatches(&self) -> Vec<SchemaMismatch> {
        let mut found: Vec<SchemaMismatch> = Vec::new();
        for (key, schemas) in by_version(&self.schemas) {
            let Some(contract) = schemas.first() else { continue };
            let record = self.get(key.0);
            let since = record.map(|info| info.published_at);
            let differing = schemas
                .iter()
                .filter(|s| s.digest != contract.digest && since.is_none_or(|at| s.published_at >= at))
                .max_by_key(|s| s.published_at);
            if let Some(differing) = differing {
                found.push(SchemaMismatch::new(contract, differing, self.newest(key.0)));
            }
        }
        found
    }

    /// The newest version of `event_type` the catalog knows of.
    fn newest(&self, event_type: &str) -> u32 {
        let published = self.schemas.iter().filter(|s| s.event_type == event_type).map(|s| s.version);
        published.chain(self.get(event_type).map(|info| info.version)).max().unwrap_or(1)
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
/// stored one of their type (or add a type): what `FleetStore::publish_types` does, for
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

/// A JSON Schema one version of an event type was published with: the catalog keeps every
/// schema of a different shape ([`shape_digest`]) a version was published with, so that a
/// changed event published under an old version (a forgotten `version = N` bump) is seen
/// before any row is run (`FleetStore::version_schemas`). The first published is the
/// version's contract.
///
/// ```
/// use dlq_core::catalog::VersionSchema;
/// use serde_json::json;
///
/// let a = VersionSchema::new("payment", 1, json!({"title": "Payment", "required": ["cents"]}), "pod-1");
/// let b = VersionSchema::new("payment", 1, json!({"title": "PaymentV1", "required": ["cents"]}), "pod-2");
/// assert_eq!(a.digest, b.digest, "titles and descriptions are not the shape");
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VersionSchema {
    /// The event type.
    pub event_type: String,
    /// The version.
    pub version: u32,
    /// The JSON Schema, as published.
    pub schema: Value,
    /// [`shape_digest`] of the schema: the same for schemas that differ only in their
    /// annotations.
    pub digest: String,
    /// When a schema of this shape was first published for this version (whole microseconds).
    pub first_published_at: DateTime<Utc>,
    /// When it was last published.
    pub published_at: DateTime<Utc>,
    /// Who last published it.
    pub published_by: String,
}

impl VersionSchema {
    /// `schema` as `event_type`'s in `version`, published now by `published_by`.
    pub fn new(event_type: impl Into<String>, version: u32, schema: Value, published_by: impl Into<String>) -> Self {
        let now = Utc::now().trunc_subsecs(6);
        Self {
            event_type: event_type.into(),
            version,
            digest: shape_digest(&schema),
            schema,
            first_published_at: now,
            published_at: now,
            published_by: published_by.into(),
        }
    }
}

impl EventTypeInfo {
    /// The schemas this record publishes, one per version: its own version's and the older
    /// ones', with its time and publisher. A schema that takes any JSON (`true`, `{}`: an
    /// upcaster on `serde_json::Value`) says nothing of a shape and is left out.
    pub fn version_schemas(&self) -> Vec<VersionSchema> {
        let own = self.schema.iter().map(|schema| (self.version, schema));
        let schemas = own.chain(self.older_schemas.iter().map(|(v, s)| (*v, s)));
        let anything = shape_digest(&Value::Object(serde_json::Map::new()));
        let any = |schema: &Value| *schema == Value::Bool(true) || shape_digest(schema) == anything;
        schemas
            .filter(|(_, schema)| !any(schema))
            .map(|(version, schema)| VersionSchema {
                first_published_at: self.published_at,
                published_at: self.published_at,
                ..VersionSchema::new(self.event_type.clone(), version, schema.clone(), self.published_by.clone())
            })
            .collect()
    }
}

/// The SHA-256, in hex, of a JSON Schema's shape: the schema with its annotations (`title`,
/// `description`, `$comment`, `$schema` strings, `examples` arrays) removed, written with
/// sorted keys.
/// Two schemas of one struct under two names (`Payment`, `PaymentV1`), or with other doc
/// comments, have the same digest; any change to a field, a type or a requirement changes it.
///
/// ```
/// use dlq_core::catalog::shape_digest;
/// use serde_json::json;
///
/// let a = json!({"title": "Payment", "properties": {"title": {"type": "string"}}});
/// let b = json!({"title": "PaymentV1", "description": "old", "properties": {"title": {"type": "string"}}});
/// assert_eq!(shape_digest(&a), shape_digest(&b));
/// assert_ne!(shape_digest(&a), shape_digest(&json!({"properties": {"title": {"type": "integer"}}})));
/// ```
pub fn shape_digest(schema: &Value) -> String {
    use sha2::{Digest, Sha256};
    fn shape(value: &Value, out: &mut String) {
        match value {
            Value::Object(map) => {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort();
                out.push('{');
                for key in keys {
                    let value = &map[key];
                    let annotation = match key.as_str() {
                        "title" | "description" | "$comment" | "$schema" => value.is_string(),
                        "examples" => value.is_array(),
                        _ => false,
                    };
                    if !annotation {
                        out.push_str(&Value::String(key.clone()).to_string());
                        out.push(':');
                        shape(value, out);
                        out.push(',');
                    }
                }
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for item in items {
                    shape(item, out);
                    out.push(',');
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut text = String::new();
    shape(schema, &mut text);
    crate::record::hex(&Sha256::digest(text.as_bytes()))
}

/// The schemas by (event type, version), each group's contract (first published) first.
fn by_version(schemas: &[VersionSchema]) -> BTreeMap<(&str, u32), Vec<&VersionSchema>> {
    let mut groups: BTreeMap<(&str, u32), Vec<&VersionSchema>> = BTreeMap::new();
    for schema in schemas {
        groups.entry((schema.event_type.as_str(), schema.version)).or_default().push(schema);
    }
    for group in groups.values_mut() {
        group.sort_by(|a, b| (a.first_published_at, &a.digest).cmp(&(b.first_published_at, &b.digest)));
    }
    groups
}

impl SchemaMismatch {
    pub(crate) fn new(contract: &VersionSchema, differing: &VersionSchema, newest: u32) -> Self {
        Self {
            event_type: contract.event_type.clone(),
            version: contract.version,
            newest,
            published_by: contract.published_by.clone(),
            published_at: contract.first_published_at,
            differing_by: differing.published_by.clone(),
        }
    }
}

impl std::fmt::Display for SchemaMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (event_type, version, newest) = (&self.event_type, self.version, self.newest);
        let next = newest.max(version).saturating_add(1);
        write!(
            f,
            "event type `{event_type}`: {} declares version {version}, but its event's JSON Schema differs from the \
             one version {version} was first published with (by {}, {}); the catalog's newest version is \
             {newest}. Rows of version {version} would not decode: a changed event needs a new version, declare \
             `version = {next}` and add an upcaster from version {} (`upcast = [...]`); if rows of version \
             {version} still decode, start the retrier with `Retrier::accept_schema_change`",
            bounded(&self.differing_by),
            bounded(&self.published_by),
            self.published_at.format("%Y-%m-%d %H:%M:%S UTC"),
            next - 1,
        )
    }
}

/// A publisher's name read from the store, for a message: control and bidirectional-format
/// characters replaced, at most 80 characters.
fn bounded(name: &str) -> String {
    let unsafe_char = |c: char| {
        c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    let mut out: String = name.chars().take(80).map(|c| if unsafe_char(c) { '\u{fffd}' } else { c }).collect();
    if name.chars().nth(80).is_some() {
        out.push('…');
    }
    out
}

/// Whether `records` (a retrier's, [`Registry::catalog`](crate::handlers::Registry::catalog)) declare a
/// version whose contract in `stored` has another shape than their event's: the first such
/// mismatch. A version never published, or a type that exports no schema, passes.
pub(crate) fn check_versions(
    records: &[EventTypeInfo],
    stored: &[VersionSchema],
    catalog: &Catalog,
) -> Result<(), Box<SchemaMismatch>> {
    let groups = by_version(stored);
    for info in records {
        let Some(schema) = &info.schema else { continue };
        let Some(contract) = groups.get(&(info.event_type.as_str(), info.version)).and_then(|g| g.first()) else {
            continue;
        };
        let mine = VersionSchema::new(info.event_type.clone(), info.version, schema.clone(), info.published_by.clone());
        if mine.digest != contract.digest {
            let newest = catalog.newest(&info.event_type).max(info.version);
            return Err(Box::new(SchemaMismatch::new(contract, &mine, newest)));
        }
    }
    Ok(())
}

/// Keeps in `stored` the schemas of `published` (records being published): a shape new to its
/// version is added, a known one is marked published again (time and publisher): what
/// `FleetStore::publish_types` does with the versions' schemas, for stores that keep the
/// catalog in memory.
///
/// ```
/// use dlq_core::catalog::{EventTypeInfo, VersionSchema, accept_schema, merge_schemas};
/// use serde_json::json;
///
/// let mut v1 = EventTypeInfo::new("payment", 1, "payments-v1");
/// v1.schema = Some(json!({"required": ["cents"]}));
/// let mut forgot = EventTypeInfo::new("payment", 1, "payments-v3");
/// forgot.schema = Some(json!({"required": ["amount_cents"]}));
/// let mut stored = Vec::new();
/// merge_schemas(&mut stored, &[v1.clone(), forgot, v1]);
/// assert_eq!(stored.len(), 2, "two shapes of version 1, the first its contract");
/// accept_schema(&mut stored, VersionSchema::new("payment", 1, json!({"required": ["amount_cents"]}), "ops"));
/// assert_eq!(stored.len(), 1);
/// ```
pub fn merge_schemas(stored: &mut Vec<VersionSchema>, published: &[EventTypeInfo]) {
    for schema in published.iter().flat_map(EventTypeInfo::version_schemas) {
        let same = |s: &&mut VersionSchema| {
            (s.event_type.as_str(), s.version, s.digest.as_str())
                == (schema.event_type.as_str(), schema.version, schema.digest.as_str())
        };
        match stored.iter_mut().find(|s| same(s)) {
            Some(known) => {
                known.published_at = schema.published_at;
                known.published_by = schema.published_by;
            }
            None => stored.push(schema),
        }
    }
    sort_schemas(stored);
}

/// Makes `schema` the only one of its version in `stored` (`FleetStore::accept_schema`),
/// for stores that keep the catalog in memory.
pub fn accept_schema(stored: &mut Vec<VersionSchema>, schema: VersionSchema) {
    stored.retain(|s| (s.event_type.as_str(), s.version) != (schema.event_type.as_str(), schema.version));
    stored.push(schema);
    sort_schemas(stored);
}

/// The order `FleetStore::version_schemas` returns: by event type, version, then
/// first publication.
fn sort_schemas(schemas: &mut [VersionSchema]) {
    schemas.sort_by(|a, b| {
        (a.event_type.as_str(), a.version, a.first_published_at, a.digest.as_str()).cmp(&(
            b.event_type.as_str(),
            b.version,
            b.first_published_at,
            b.digest.as_str(),
        ))
    });
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
        static V3: Registration = Registration {
            upcast: &[crate::upcast::unchanged, crate::upcast::unchanged],
            ..crate::handler::for_tests("payment", 3)
        };
        let info = EventTypeInfo::of(&V3, "me");
        assert_eq!((info.version, info.upcast_from, info.encrypted), (3, 1, false));
        assert_eq!(info.published_by, "me");
        let current = serde_json::json!({"type": "object"});
        let (schema, older) = Schemas([(1, Value::Null), (3, current.clone()), (4, Value::Null)].into()).split(3);
        assert_eq!((schema, older.keys().copied().collect::<Vec<_>>()), (Some(current), vec![1]));
    }
}
