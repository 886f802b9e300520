//! The type catalog on SQLite (migration 0011) and its versions' schemas (0015): the records
//! and schemas upserted in one `BEGIN IMMEDIATE` transaction.

use dlq_core::catalog::{EventTypeInfo, VersionSchema};
use dlq_core::store::StoreResult;
use serde_json::Value;
use sqlx::Row;
use sqlx::sqlite::{SqlitePool, SqliteRow};

use super::codec::{self, sql};
use super::write::begin;
use crate::catalog::{JsonColumns, record, schemas_of, version_schema, winners};

/// A record replaces the stored one of its type when its version is the same or newer.
const UPSERT: &str = "INSERT INTO dlq_event_types AS stored \
     (event_type, version, json_schema, older_schemas, upcast_from, encrypted, redact, published_at, published_by) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (event_type) DO UPDATE SET \
     version = excluded.version, json_schema = excluded.json_schema, older_schemas = excluded.older_schemas, \
     upcast_from = excluded.upcast_from, encrypted = excluded.encrypted, redact = excluded.redact, \
     published_at = excluded.published_at, published_by = excluded.published_by \
     WHERE stored.version <= excluded.version";
/// A shape new to its version is added; a known one takes the new time and publisher.
const UPSERT_SCHEMA: &str = "INSERT INTO dlq_type_schemas AS stored \
     (event_type, version, digest, json_schema, first_published_at, published_at, published_by) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6) ON CONFLICT (event_type, version, digest) DO UPDATE SET \
     published_at = excluded.published_at, published_by = excluded.published_by";
const DROP_OTHER_SCHEMAS: &str = "DELETE FROM dlq_type_schemas WHERE event_type = ?1 AND version = ?2 AND digest <> ?3";
const SCHEMAS: &str = "SELECT event_type, version, digest, json_schema, first_published_at, published_at, \
     published_by FROM dlq_type_schemas ORDER BY event_type, version, first_published_at, digest";
const ALL: &str = "SELECT event_type, version, json_schema, older_schemas, upcast_from, encrypted, redact, \
     published_at, published_by FROM dlq_event_types ORDER BY event_type";

/// Writes the records that win over the stored ones.
pub(super) async fn publish(pool: &SqlitePool, types: Vec<EventTypeInfo>) -> StoreResult<()> {
    let schemas = schemas_of(&types);
    let types = winners(types);
    if types.is_empty() {
        return Ok(());
    }
    let mut tx = begin(pool).await?;
    for schema in &schemas {
        upsert_schema(&mut tx, schema).await?;
    }
    for info in &types {
        sqlx::query(UPSERT)
            .bind(&info.event_type)
            .bind(i64::from(info.version))
            .bind(info.schema.as_ref().map(Value::to_string))
            .bind(serde_json::json!(info.older_schemas).to_string())
            .bind(i64::from(info.upcast_from))
            .bind(info.encrypted)
            .bind(codec::json_list(&info.redact))
            .bind(info.published_at.timestamp_micros())
            .bind(&info.published_by)
            .execute(&mut *tx)
            .await
            .map_err(sql)?;
    }
    tx.commit().await.map_err(sql)
}

async fn upsert_schema(tx: &mut sqlx::SqliteConnection, schema: &VersionSchema) -> StoreResult<()> {
    sqlx::query(UPSERT_SCHEMA)
        .bind(&schema.event_type)
        .bind(i64::from(schema.version))
        .bind(&schema.digest)
        .bind(schema.schema.to_string())
        .bind(schema.published_at.timestamp_micros())
        .bind(&schema.published_by)
        .execute(tx)
        .await
        .map(drop)
        .map_err(sql)
}

/// Makes `schema` the only one of its type and version.
pub(super) async fn accept(pool: &SqlitePool, schema: VersionSchema) -> StoreResult<()> {
    let mut tx = begin(pool).await?;
    sqlx::query(DROP_OTHER_SCHEMAS)
        .bind(&schema.event_type)
        .bind(i64::from(schema.version))
        .bind(&schema.digest)
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
    upsert_schema(&mut tx, &schema).await?;
    tx.commit().await.map_err(sql)
}

/// The versions' schemas, by type, version, then first publication.
pub(super) async fn schemas(pool: &SqlitePool) -> StoreResult<Vec<VersionSchema>> {
    let rows = sqlx::query(SCHEMAS).fetch_all(pool).await.map_err(sql)?;
    rows.iter()
        .map(|row| {
            let int = |name: &str| row.try_get::<i64, _>(name).map_err(sql);
            let text = |name: &str| row.try_get::<String, _>(name).map_err(sql);
            let event_type = text("event_type")?;
            let schema = serde_json::from_str::<Value>(&text("json_schema")?)
                .map_err(|e| codec::decode_error(format!("dlq_type_schemas row `{event_type}`: json_schema: {e}")))?;
            let times =
                (codec::time(int("first_published_at")?)?, codec::time(int("published_at")?)?, text("published_by")?);
            version_schema((event_type, int("version")?, text("digest")?), schema, times)
        })
        .collect()
}

/// The catalog, by event type.
pub(super) async fn all(pool: &SqlitePool) -> StoreResult<Vec<EventTypeInfo>> {
    let rows = sqlx::query(ALL).fetch_all(pool).await.map_err(sql)?;
    rows.iter().map(info).collect()
}

fn info(row: &SqliteRow) -> StoreResult<EventTypeInfo> {
    let int = |name: &str| row.try_get::<i64, _>(name).map_err(sql);
    let text = |name: &str| row.try_get::<String, _>(name).map_err(sql);
    let event_type = text("event_type")?;
    let parse = |name: &str, text: &str| {
        serde_json::from_str::<Value>(text)
            .map_err(|e| codec::decode_error(format!("dlq_event_types row `{event_type}`: {name}: {e}")))
    };
    // Schemas serde cannot read are none (see `JsonColumns`); the redaction list must read.
    let json_schema = row.try_get::<Option<String>, _>("json_schema").map_err(sql)?;
    let json = JsonColumns {
        json_schema: json_schema.and_then(|s| parse("json_schema", &s).ok()),
        older_schemas: parse("older_schemas", &text("older_schemas")?).ok(),
        redact: Ok(parse("redact", &text("redact")?)?),
    };
    let keys = (event_type.clone(), int("version")?, int("upcast_from")?);
    let published = (codec::time(int("published_at")?)?, text("published_by")?);
    record(keys, json, row.try_get("encrypted").map_err(sql)?, published)
}
