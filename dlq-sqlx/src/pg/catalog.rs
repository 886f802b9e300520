//! The type catalog on PostgreSQL (migration 0024) and its versions' schemas (0036): one
//! transaction of two upserts per publication.

use dlq_core::catalog::{EventTypeInfo, VersionSchema};
use dlq_core::store::StoreResult;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgStore;
use crate::catalog::{JsonColumns, columns, record, schema_columns, schemas_of, version_schema, winners};
use crate::stored_json::StoredJson;

fn db(err: sqlx::Error) -> dlq_core::Error {
    dlq_core::Error::store(err)
}

/// Writes the records that win over the stored ones (`sql/publish_types.sql`) and keeps their versions' schemas (`sql/publish_schemas.sql`), in one transaction.
pub(crate) async fn publish(store: &PgStore, types: Vec<EventTypeInfo>) -> StoreResult<()> {
    let schemas: Vec<_> = schemas_of(&types).iter().map(schema_columns).collect();
    let rows: Vec<_> = winners(types).iter().map(columns).collect();
    if rows.is_empty() {
        return Ok(());
    }
    let mut tx = store.inner.pool.begin().await.map_err(db)?;
    sqlx::query(store.inner.sql.publish_types.sql())
        .bind(serde_json::Value::Array(rows))
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    if !schemas.is_empty() {
        let query = sqlx::query(store.inner.sql.publish_schemas.sql()).bind(serde_json::Value::Array(schemas));
        query.execute(&mut *tx).await.map_err(db)?;
    }
    tx.commit().await.map_err(db)
}

/// Makes `schema` the only one of its type and version.
pub(crate) async fn accept(store: &PgStore, schema: VersionSchema) -> StoreResult<()> {
    let mut tx = store.inner.pool.begin().await.map_err(db)?;
    sqlx::query(store.inner.sql.accept_schema_drop.sql())
        .bind(&schema.event_type)
        .bind(i32::try_from(schema.version).unwrap_or(i32::MAX))
        .bind(&schema.digest)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
    let row = serde_json::Value::Array(vec![schema_columns(&schema)]);
    sqlx::query(store.inner.sql.publish_schemas.sql()).bind(row).execute(&mut *tx).await.map_err(db)?;
    tx.commit().await.map_err(db)
}

/// The versions' schemas, by type, version, then first publication.
pub(crate) async fn schemas(store: &PgStore) -> StoreResult<Vec<VersionSchema>> {
    let rows = sqlx::query(store.inner.sql.version_schemas.sql()).fetch_all(&store.inner.pool).await.map_err(db)?;
    rows.iter()
        .map(|row| {
            let keys = (
                row.try_get("event_type").map_err(db)?,
                i64::from(row.try_get::<i32, _>("version").map_err(db)?),
                row.try_get("digest").map_err(db)?,
            );
            let times = (
                row.try_get("first_published_at").map_err(db)?,
                row.try_get("published_at").map_err(db)?,
                row.try_get("published_by").map_err(db)?,
            );
            // A schema serde cannot read is kept as null: its shape is the stored digest.
            let schema = row.try_get::<StoredJson, _>("json_schema").map_err(db)?.read().unwrap_or_default();
            version_schema(keys, schema, times)
        })
        .collect()
}

/// The catalog, by event type.
pub(crate) async fn all(store: &PgStore) -> StoreResult<Vec<EventTypeInfo>> {
    let rows = sqlx::query(store.inner.sql.event_types.sql()).fetch_all(&store.inner.pool).await.map_err(db)?;
    rows.iter().map(info).collect()
}

fn info(row: &PgRow) -> StoreResult<EventTypeInfo> {
    let int = |name: &str| row.try_get::<i32, _>(name).map(i64::from).map_err(db);
    let keys = (row.try_get("event_type").map_err(db)?, int("version")?, int("upcast_from")?);
    let jsonb = |name: &str| row.try_get::<Option<StoredJson>, _>(name).map_err(db);
    let json = JsonColumns {
        json_schema: jsonb("json_schema")?.and_then(StoredJson::read),
        older_schemas: jsonb("older_schemas")?.and_then(StoredJson::read),
        redact: jsonb("redact")?.map_or(Ok(serde_json::Value::Null), StoredJson::read_or_why),
    };
    let published = (row.try_get("published_at").map_err(db)?, row.try_get("published_by").map_err(db)?);
    record(keys, json, row.try_get("encrypted").map_err(db)?, published)
}
