//! The type catalog's rows (`dlq_event_types`: PostgreSQL migration 0024, SQLite 0011; the
//! versions' schemas, `dlq_type_schemas`: PostgreSQL 0036, SQLite 0015), as both stores write
//! and read them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use dlq_core::catalog::{EventTypeInfo, VersionSchema};
use serde_json::Value;

/// The records to write: one per event type, the one that wins when a batch names a type twice
/// (a statement may not write a row twice).
pub(crate) fn winners(types: Vec<EventTypeInfo>) -> Vec<EventTypeInfo> {
    let mut winners = Vec::with_capacity(types.len());
    dlq_core::catalog::merge(&mut winners, types);
    winners
}

/// The versions' schemas of `types` to write: one per type, version and shape, the last
/// publication of each (a statement may not write a row twice).
pub(crate) fn schemas_of(types: &[EventTypeInfo]) -> Vec<VersionSchema> {
    let mut schemas = Vec::new();
    dlq_core::catalog::merge_schemas(&mut schemas, types);
    schemas
}

/// One version's schema as a JSON object with the table's column names.
#[cfg(feature = "postgres")]
pub(crate) fn schema_columns(schema: &VersionSchema) -> Value {
    serde_json::json!({
        "event_type": schema.event_type,
        "version": schema.version,
        "digest": schema.digest,
        "json_schema": schema.schema,
        "published_at": schema.published_at,
        "published_by": schema.published_by,
    })
}

/// A stored version's schema from its columns; a column that does not hold what the catalog
/// writes is reported.
pub(crate) fn version_schema(
    (event_type, version, digest): (String, i64, String),
    schema: Value,
    (first_published_at, published_at, published_by): (DateTime<Utc>, DateTime<Utc>, String),
) -> Result<VersionSchema, dlq_core::Error> {
    let version = u32::try_from(version).map_err(|e| {
        dlq_core::Error::store(std::io::Error::other(format!("dlq_type_schemas row `{event_type}`: version: {e}")))
    })?;
    let mut stored = VersionSchema::new(event_type, version, schema, published_by);
    stored.digest = digest;
    stored.first_published_at = first_published_at;
    stored.published_at = published_at;
    Ok(stored)
}

/// One record as a JSON object with the table's column names (PostgreSQL writes a batch as one
/// JSON array).
#[cfg(feature = "postgres")]
pub(crate) fn columns(info: &EventTypeInfo) -> Value {
    serde_json::json!({
        "event_type": info.event_type,
        "version": info.version,
        "json_schema": info.schema,
        "older_schemas": info.older_schemas,
        "upcast_from": info.upcast_from,
        "encrypted": info.encrypted,
        "redact": info.redact,
        "published_at": info.published_at,
        "published_by": info.published_by,
    })
}

/// The JSON columns of a stored record, as read: a schema that serde cannot read (a number
/// outside `f64`, nesting past its recursion limit) is `None`, as if none was published, so
/// rows of its type are reported unchecked rather than failing every read of the catalog; a
/// redaction list that cannot be read is `Err` (masking never weakens silently).
pub(crate) struct JsonColumns {
    pub(crate) json_schema: Option<Value>,
    /// `None`: none to read.
    pub(crate) older_schemas: Option<Value>,
    pub(crate) redact: Result<Value, String>,
}

/// A stored record from its columns; a column that does not hold what the catalog writes is
/// reported, not skipped (except schemas serde cannot read, see [`JsonColumns`]).
pub(crate) fn record(
    (event_type, version, upcast_from): (String, i64, i64),
    json: JsonColumns,
    encrypted: bool,
    (published_at, published_by): (DateTime<Utc>, String),
) -> Result<EventTypeInfo, dlq_core::Error> {
    let bad = |what: &str, e: &dyn std::fmt::Display| {
        dlq_core::Error::store(std::io::Error::other(format!("dlq_event_types row `{event_type}`: {what}: {e}")))
    };
    let number = |what: &str, n: i64| u32::try_from(n).map_err(|e| bad(what, &e));
    let mut info = EventTypeInfo::new(event_type.clone(), number("version", version)?, published_by);
    info.upcast_from = number("upcast_from", upcast_from)?;
    info.schema = json.json_schema.filter(|s| !s.is_null());
    if let Some(older) = json.older_schemas {
        info.older_schemas =
            serde_json::from_value::<BTreeMap<u32, Value>>(older).map_err(|e| bad("older_schemas", &e))?;
    }
    info.redact = serde_json::from_value(json.redact.map_err(|e| bad("redact", &e))?).map_err(|e| bad("redact", &e))?;
    info.encrypted = encrypted;
    info.published_at = published_at;
    Ok(info)
}
