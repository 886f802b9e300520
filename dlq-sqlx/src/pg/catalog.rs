//! The type catalog on PostgreSQL (migration 0024): one upsert statement per publication.

use dlq_core::catalog::EventTypeInfo;
use dlq_core::store::StoreResult;
use sqlx::Row;
use sqlx::postgres::PgRow;

use super::PgStore;
use crate::catalog::{JsonColumns, columns, record, winners};
use crate::stored_json::StoredJson;

fn db(err: sqlx::Error) -> dlq_core::Error {
    dlq_core::Error::store(err)
}

/// Writes the records that win over the stored ones (`sql/publish_types.sql`).
pub(crate) async fn publish(store: &PgStore, types: Vec<EventTypeInfo>) -> StoreResult<()> {
    let rows: Vec<_> = winners(types).iter().map(columns).collect();
    if rows.is_empty() {
        return Ok(());
    }
    sqlx::query(store.inner.sql.publish_types.sql())
        .bind(serde_json::Value::Array(rows))
        .execute(&store.inner.pool)
        .await
        .map(drop)
        .map_err(db)
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
