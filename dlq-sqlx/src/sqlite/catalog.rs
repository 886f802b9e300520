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

const UPSERT: &str = include_str!("sql/publish_types.sql");
const UPSERT_SCHEMA: &str = include_str!("sql/publish_schemas.sql");
const DROP_OTHER_SCHEMAS: &str = include_str!("sql/accept_schema_drop.sql");
const SCHEMAS: &str = include_str!("sql/version_schemas.sql");
const ALL: &str = include_str!("sql/event_types.sql");

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
