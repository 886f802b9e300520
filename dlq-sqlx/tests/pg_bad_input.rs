//! The bad-input table of docs/DESIGN.md on PostgreSQL: bad input gets a clear error and nothing is lost.

mod pg_support;

use std::sync::Arc;
use std::time::Duration;

use dlq_core::store::Settlement;
use dlq_core::{
    ErrorClass, HandlerError, ListFilter, Payload, Scope, Status, adapter::DeadReason, adapter::Dispatched,
    adapter::Dispatcher, adapter::SourceMeta, classify::FailureInfo, dead_letter, handlers, handlers::Registry,
    store::NewDeadLetter, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use pg_support::*;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

#[derive(Debug, Serialize, Deserialize)]
struct Payment {
    id: u64,
    currency: String,
}

#[dead_letter(event_type = "bad-input-payment", max_retries = 3)]
async fn handle_payment(p: Payment) -> Result<(), std::io::Error> {
    if p.currency.trim() != p.currency {
        return Err(std::io::Error::other("currency has spaces"));
    }
    Ok(())
}

fn registry() -> Registry {
    handlers![handle_payment].expect("one handler")
}

async fn dispatch_raw(store: &PgStore, bytes: &[u8]) -> (i64, Option<DeadReason>) {
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), registry());
    match dispatcher.dispatch("bad-input-payment", bytes).await.expect("parked") {
        Dispatched::Parked { id, dead_reason, .. } => (id, dead_reason),
        other => panic!("expected a parked event, got {other:?}"),
    }
}

async fn stored_raw(store: &PgStore, id: i64) -> Vec<u8> {
    match store.get(id).await.unwrap().unwrap().payload {
        Payload::Raw { bytes, truncated: None } => bytes,
        other => panic!("expected raw bytes, got {other:?}"),
    }
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn bytes_that_are_not_json_are_parked_raw_and_undecodable(pool: PgPool) {
    let store = store(&pool).await;
    let bytes = b"\xff\xfe\x00 definitely not json \x80";
    let (id, reason) = dispatch_raw(&store, bytes).await;
    assert_eq!(reason, Some(DeadReason::Undecodable));
    assert_eq!(stored_raw(&store, id).await, bytes, "stored byte for byte");
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.status, Status::FailedPermanently);
    assert_eq!(row.failure.kind, "undecodable");
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn json_with_a_nul_escape_is_stored_raw(pool: PgPool) {
    let store = store(&pool).await;
    let bytes = br#"{"id": 7, "currency": "US\u0000D "}"#; // the handler fails: trailing space
    let (id, _) = dispatch_raw(&store, bytes).await;
    assert_eq!(stored_raw(&store, id).await, bytes, "JSONB rejects \\u0000: kept as bytes");
    let (id, reason) = dispatch_raw(&store, br#"{"id": "\u0000"}"#).await;
    assert_eq!(reason, Some(DeadReason::Undecodable));
    assert_eq!(stored_raw(&store, id).await, br#"{"id": "\u0000"}"#);
    // A typed payload built by hand with a NUL is also stored raw rather than failing the park.
    let value = serde_json::json!({"note": "a\u{0}b"});
    let letter = NewDeadLetter::new("x", Payload::Json(value.clone()), failure(ErrorClass::Permanent, "bad"));
    let id = store.park(letter).await.unwrap().id;
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&stored_raw(&store, id).await).unwrap(), value);
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn nesting_past_serdes_limit_is_stored_raw(pool: PgPool) {
    let store = store(&pool).await;
    let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
    let (id, reason) = dispatch_raw(&store, deep.as_bytes()).await;
    assert_eq!(reason, Some(DeadReason::Undecodable));
    assert_eq!(stored_raw(&store, id).await, deep.as_bytes());
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn payloads_over_the_limit_are_truncated_with_length_and_hash(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default().max_payload_bytes(1024)).await;
    let big = serde_json::json!({"id": 1, "blob": "x".repeat(10_000)});
    let original = serde_json::to_vec(&big).unwrap();
    let letter = NewDeadLetter::new("payment", Payload::Json(big), failure(ErrorClass::Transient, "down"));
    let id = store.park(letter).await.unwrap().id;
    let Payload::Raw { bytes, truncated: Some(t) } = store.get(id).await.unwrap().unwrap().payload else {
        panic!("expected a truncated payload");
    };
    assert_eq!(bytes, original[..1024]);
    assert_eq!(t.original_len, original.len() as u64);
    let expected: String =
        sqlx::query_scalar("SELECT encode(sha256($1), 'hex')").bind(&original).fetch_one(&pool).await.unwrap();
    assert_eq!(t.original_sha256, expected);
    let flagged: bool = sqlx::query_scalar("SELECT payload_truncated FROM dlq_events WHERE id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(flagged);
    let raw = Payload::Raw { bytes: vec![0xab; 5000], truncated: None };
    let id = store.park(NewDeadLetter::new("payment", raw, failure(ErrorClass::Transient, "down"))).await.unwrap().id;
    assert!(store.get(id).await.unwrap().unwrap().payload.is_truncated());
}

/// An upload whose fields serialize in another order than sorted keys: a hash taken over a
/// `serde_json::Value` of it (keys sorted) is not the hash of its serialization.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Upload {
    name: String,
    blob: String,
}

#[dead_letter(event_type = "bad-input-upload")]
async fn handle_upload(u: Upload) -> Result<(), std::io::Error> {
    Err(std::io::Error::other(format!("scanner down for {}", u.name)))
}

/// An upload whose compact serialization takes `len` bytes.
fn upload_of(len: usize) -> Upload {
    let upload = Upload { name: "scan".into(), blob: String::new() };
    let empty = serde_json::to_vec(&upload).unwrap().len();
    Upload { blob: "x".repeat(len - empty), ..upload }
}

async fn sha256_hex(pool: &PgPool, bytes: &[u8]) -> String {
    sqlx::query_scalar("SELECT encode(sha256($1), 'hex')").bind(bytes).fetch_one(pool).await.unwrap()
}

/// The row of a too-large event: dead (`too_large`), its first `max` bytes kept raw.
async fn too_large_row(store: &PgStore, id: i64, max: usize) -> (Vec<u8>, dlq_core::store::Truncation) {
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!((row.status, row.dead_reason), (Status::FailedPermanently, Some(DeadReason::TooLarge)));
    let Payload::Raw { bytes, truncated: Some(t) } = row.payload else { panic!("expected a cut payload") };
    assert_eq!(bytes.len(), max);
    (bytes, t)
}

/// A live handler's event one byte over the store's limit (`PgConfig::max_payload_bytes`, not
/// the default) is `TooLarge` with the row's id, never `ParkFailed`: "too large" is decided
/// from the event's serialization before the store is called. The row keeps the first bytes
/// of `serde_json::to_vec(&event)` and that serialization's length and SHA-256 (checked by
/// PostgreSQL's `sha256`); an event of exactly the limit is parked whole.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_live_event_over_the_stores_limit_is_too_large_with_the_hash_of_its_serialization(pool: PgPool) {
    const MAX: usize = 1024;
    let store = store_with(&pool, PgConfig::default().max_payload_bytes(MAX)).await;
    let shared: Arc<dyn DeadLetterStore> = Arc::new(store.clone());
    let upload = upload_of(MAX + 1);
    let original = serde_json::to_vec(&upload).unwrap();
    let err = dlq_core::with_store(shared.clone(), handle_upload(upload)).await.unwrap_err();
    let HandlerError::TooLarge { id, class, .. } = &err else { panic!("expected TooLarge, got {err:?}") };
    let (kept, t) = too_large_row(&store, *id, MAX).await;
    assert_eq!(kept, original[..MAX], "the first bytes of the serialization, in field order");
    assert_eq!(t.original_len, original.len() as u64);
    assert_eq!(t.original_sha256, sha256_hex(&pool, &original).await);
    assert_eq!((err.dlq_id(), *class, err.is_parked()), (Some(*id), ErrorClass::Transient, false));

    let whole = upload_of(MAX);
    let err = dlq_core::with_store(shared, handle_upload(whole.clone())).await.unwrap_err();
    let HandlerError::Parked { id, .. } = err else { panic!("expected Parked, got {err:?}") };
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.payload, Payload::Json(serde_json::to_value(&whole).unwrap()));
}

/// A `Dispatcher` given bytes over the store's limit parks their first bytes with the length
/// and SHA-256 of the bytes exactly as given (not of JSON made again from them), and says
/// `TooLarge` with the row's id.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn dispatched_bytes_over_the_limit_keep_the_hash_of_the_bytes_given(pool: PgPool) {
    const MAX: usize = 1024;
    let store = store_with(&pool, PgConfig::default().max_payload_bytes(MAX)).await;
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), handlers![handle_upload].unwrap());
    let input = serde_json::to_vec(&upload_of(MAX + 1)).unwrap();
    let out = dispatcher.dispatch("bad-input-upload", &input).await.expect("recorded");
    let Dispatched::TooLarge { id, failure } = out else { panic!("expected TooLarge, got {out:?}") };
    assert!(failure.reason.contains("scanner down"), "{}", failure.reason);
    let (kept, t) = too_large_row(&store, id, MAX).await;
    assert_eq!((kept.as_slice(), t.original_len), (&input[..MAX], input.len() as u64));
    assert_eq!(t.original_sha256, sha256_hex(&pool, &input).await);
}

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn huge_and_invalid_error_text_is_bounded_and_replaced_on_retry(pool: PgPool) {
    let store = store(&pool).await;
    let huge = "E".repeat(4 * 1024 * 1024);
    let mut info = FailureInfo::new(ErrorClass::Transient, "io", huge.clone(), vec![huge.clone()], Some(huge.clone()));
    assert!(info.reason.len() < FailureInfo::MAX_REASON_BYTES + 64);
    info.reason.push('\0'); // fields are public: the store still cleans them
    let id = store.park(NewDeadLetter::new("payment", Payload::Json(serde_json::json!(1)), info)).await.unwrap().id;
    let row = store.get(id).await.unwrap().unwrap();
    assert!(row.failure.reason.len() < FailureInfo::MAX_REASON_BYTES + 64 && !row.failure.reason.contains('\0'));
    assert!(row.failure.stacktrace.unwrap().len() < 70 * 1024);

    let invalid = String::from_utf8_lossy(b"bad \xff\xfe bytes and a \0 nul").into_owned();
    let second = FailureInfo::new(ErrorClass::Transient, "io", invalid, vec!["x\0y".into()], Some("t\0".into()));
    let claimed = claim(&store, &["payment"], 1).await;
    let report = store
        .settle(vec![Settlement::Retry { lease: claimed[0].lease, delay: Duration::ZERO, failure: second.clone() }])
        .await
        .unwrap();
    assert_eq!(report.applied, 1);
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.failure.reason, "bad \u{FFFD}\u{FFFD} bytes and a \u{FFFD} nul", "replaced, never appended");
    assert_eq!(row.failure.chain, vec!["x\u{FFFD}y"]);
    assert_eq!(row.failure.stacktrace.as_deref(), Some("t\u{FFFD}"));
}

const HOSTILE: &str = "'; DROP TABLE dlq_events; -- \"q\" \\ $1 %_ {schema} ' OR '1'='1 \u{1F4A5}";

#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn sql_metacharacters_round_trip_exactly_in_every_text_field(pool: PgPool) {
    let store = store(&pool).await;
    let info =
        FailureInfo::new(ErrorClass::Permanent, HOSTILE, HOSTILE.into(), vec![HOSTILE.into()], Some(HOSTILE.into()));
    let mut source =
        SourceMeta { topic: Some(HOSTILE.into()), partition: Some(1), offset: Some(2), ..SourceMeta::default() };
    source.headers.insert(HOSTILE.into(), HOSTILE.into());
    source.trace_context = Some(HOSTILE.into());
    let payload = Payload::Json(serde_json::json!({ HOSTILE: HOSTILE }));
    let letter = NewDeadLetter::new(HOSTILE, payload.clone(), info.clone())
        .with_handler(HOSTILE)
        .with_dedupe_key(HOSTILE)
        .with_source(source.clone())
        .dead(DeadReason::Permanent);
    let id = store.park(letter).await.unwrap().id;
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!((row.event_type.as_str(), row.handler.as_str()), (HOSTILE, HOSTILE));
    assert_eq!(row.payload, payload);
    assert_eq!(row.failure, info);
    assert_eq!(row.source, source);
    assert_eq!(row.dedupe_key.as_deref(), Some(HOSTILE));
    let filter = ListFilter::default().event_type(HOSTILE).fingerprint(&info.fingerprint);
    assert_eq!(store.list(filter.clone()).await.unwrap().len(), 1);
    let hostile = dlq_core::admin::Admin::new(Arc::new(store.clone()), HOSTILE);
    assert_eq!(hostile.redrive(filter, HOSTILE).await.unwrap().moved_ids, vec![id]);
    let audit = store.audit(id).await.unwrap();
    assert_eq!((audit[0].actor.as_str(), audit[0].reason.as_deref()), (HOSTILE, Some(HOSTILE)));
    let raw = Payload::Raw { bytes: HOSTILE.as_bytes().to_vec(), truncated: None };
    hostile.replace_payload(id, raw.clone(), HOSTILE).await.unwrap();
    assert_eq!(store.get(id).await.unwrap().unwrap().payload, raw);
    let dup = store.park(NewDeadLetter::new(HOSTILE, payload, info).with_dedupe_key(HOSTILE)).await.unwrap();
    assert_eq!((dup.id, dup.deduplicated), (id, true));
    let circuit = hostile.pause_type(HOSTILE, HOSTILE).await.unwrap();
    assert_eq!((circuit.event_type.as_str(), circuit.pause_reason.as_deref()), (HOSTILE, Some(HOSTILE)));
    let log = store.circuit_log(Some(HOSTILE.into()), 5).await.unwrap();
    assert_eq!((log[0].actor.as_str(), log[0].reason.as_str()), (HOSTILE, HOSTILE));
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT tablename::text FROM pg_tables WHERE tablename LIKE 'dlq_%' ORDER BY 1")
            .fetch_all(&pool)
            .await
            .unwrap();
    let expected = [
        "dlq_attempts",
        "dlq_audit",
        "dlq_circuit_log",
        "dlq_circuits",
        "dlq_erasures",
        "dlq_event_types",
        "dlq_events",
        "dlq_operations",
        "dlq_parked_hours",
        "dlq_retriers",
        "dlq_starts",
        "dlq_subject_key",
        "dlq_tallies",
        "dlq_type_schemas",
    ];
    assert_eq!(tables, expected, "none dropped");
}

#[sqlx::test(migrations = false)]
async fn hostile_schema_names_are_rejected_and_a_plain_one_works(pool: PgPool) {
    for hostile in ["dlq\"; DROP SCHEMA public CASCADE; --", "a b", "pg_temp", "", "x.y", "Ω", "1abc"] {
        let config = PgConfig::default().schema(hostile);
        let err = PgStore::from_pool(pool.clone(), config.clone()).await.unwrap_err();
        assert!(matches!(&err, dlq_core::Error::Config { key, .. } if key == "schema"), "{hostile:?}: {err}");
        assert!(err.to_string().contains("invalid schema name"), "{err}");
        assert!(dlq_sqlx::postgres::migrate(&pool, hostile).await.is_err());
        assert!(PgStore::connect_with("postgres://postgres@127.0.0.1:1/x", config).await.is_err());
    }
    let schemas: Vec<String> =
        sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname NOT LIKE 'pg_%'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(schemas.len(), 2, "nothing was created: {schemas:?}"); // public, information_schema

    let tenant = store_with(&pool, PgConfig::default().schema("Tenant_A")).await;
    assert_eq!(tenant.channel(), "dlq_events.Tenant_A");
    let id = tenant.park(letter("payment", 1)).await.unwrap().id;
    assert_eq!(claim(&tenant, &["payment"], 5).await[0].id(), id);
    let in_schema: i64 =
        sqlx::query_scalar("SELECT count(*) FROM \"Tenant_A\".dlq_events").fetch_one(&pool).await.unwrap();
    assert_eq!(in_schema, 1);
    let public: bool =
        sqlx::query_scalar("SELECT to_regclass('public.dlq_events') IS NOT NULL").fetch_one(&pool).await.unwrap();
    assert!(!public, "the tables live in the configured schema only");
    // Running the migrations again is a no-op.
    dlq_sqlx::postgres::migrate(&pool, "Tenant_A").await.unwrap();
}

#[sqlx::test(migrations = false)]
async fn a_modified_migration_fails_naming_the_schema_with_sqlx_as_the_cause(pool: PgPool) {
    dlq_sqlx::postgres::migrate(&pool, "dlq").await.unwrap();
    sqlx::query("UPDATE dlq._sqlx_migrations SET checksum = '\\x00' WHERE version = 1").execute(&pool).await.unwrap();
    let err = PgStore::from_pool(pool, PgConfig::default().schema("dlq")).await.unwrap_err();
    assert!(matches!(err, dlq_core::Error::Store(_)), "{err:?}");
    assert!(err.to_string().contains("migrating the dead-letter schema `dlq` failed"), "{err}");
    let mut chain = Vec::new();
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        chain.push(cause.to_string());
        source = cause.source();
    }
    assert!(chain.iter().any(|c| c.contains("previously applied but has been modified")), "{chain:?}");
}

/// Migrations 12 to 16 had their comments reworded after they shipped: a schema that ran the
/// earlier text (its checksums recorded) is up to date, and a checksum of neither text is still
/// a modified migration.
#[sqlx::test(migrations = false)]
async fn a_migration_applied_before_its_comments_were_reworded_is_not_modified(pool: PgPool) {
    use sha2::Digest as _;
    const SHIPPED: &str =
        "651550f6ffcd471b584f2962f12cce90f22e6bb80cb1612ed4199f1cd9d7b00438062246508977297893b6e6b3424bc4";
    // sqlx's checksum is the SHA-384 of the file, so the shipped files' digests are the ones
    // their schemas recorded.
    let now = include_str!("../migrations/postgres/0012_operator_indexes.sql");
    let recorded = dlq_sqlx::postgres::MIGRATOR.iter().find(|m| m.version == 12).unwrap().checksum.to_vec();
    assert_eq!(recorded, sha2::Sha384::digest(now.as_bytes()).to_vec());
    dlq_sqlx::postgres::migrate(&pool, "dlq").await.unwrap();
    let set = "UPDATE dlq._sqlx_migrations SET checksum = decode($2, 'hex') WHERE version = $1";
    for (version, shipped) in [
        (12_i64, SHIPPED),
        (13, "8b86c47d64673d4422acee175b2674453c986192d9974e838113f252175c3f2a27daa85a52c71c988529533ffe5a03a5"),
        (14, "4f825acd00bf8f06f5f6c1420530190e9bac0465dfdfad794c82b542f657e3c0913afd97e1e2d84d0236e21203e2fa4f"),
        (15, "ddc6e3858178a2360a48a3622643aca2d7fc33f842c6ff6d53c6b7a326621d931e34cd6ae42a50e08e805dfc08794b68"),
        (16, "20fd726bf73bc7098d96e47e4bcc23b8c7e32a2db901caa74abd72d0cf893c0e4190f42c3451ae1b9e501691d5a494ed"),
    ] {
        sqlx::query(set).bind(version).bind(shipped).execute(&pool).await.unwrap();
    }
    let store = PgStore::from_pool(pool.clone(), PgConfig::default().schema("dlq")).await.unwrap();
    store.park(letter("payment", 1)).await.unwrap();

    let other = SHIPPED.replace('6', "7");
    sqlx::query(set).bind(12_i64).bind(other).execute(&pool).await.unwrap();
    let err = dlq_sqlx::postgres::migrate(&pool, "dlq").await.unwrap_err();
    assert!(format!("{err:?}").contains("VersionMismatch(12)"), "{err:?}");
}

/// On a paused clock the park timeout and sqlx's retries of the refused connection run in
/// virtual time: a park that did not give up at its timeout would outlast the patience, far
/// past that timeout, and fail the test at once.
#[tokio::test(start_paused = true)]
async fn park_while_postgres_is_unreachable_fails_within_the_timeout() {
    const PATIENCE: Duration = Duration::from_secs(60);
    let config = PgConfig::default().run_migrations(false).park_timeout(Duration::from_millis(500));
    let store = PgStore::connect_with("postgres://postgres@127.0.0.1:1/dlq", config).await.expect("lazy store");
    let err = tokio::time::timeout(PATIENCE, store.park(letter("payment", 1))).await.expect("gave up at the timeout");
    let err = err.expect_err("must not report success");
    assert!(matches!(err, dlq_core::Error::Timeout(_) | dlq_core::Error::Store(_)), "{err}");

    let live =
        dlq_core::with_store(Arc::new(store.clone()), handle_payment(Payment { id: 1, currency: "USD ".into() }));
    let result = tokio::time::timeout(PATIENCE, live).await.expect("the live path gave up at the timeout");
    assert!(
        matches!(result, Err(dlq_core::HandlerError::ParkFailed { .. })),
        "the caller learns parking failed: {result:?}"
    );
    let dispatcher = Dispatcher::new(Arc::new(store.clone()), registry());
    let dispatched = tokio::time::timeout(PATIENCE, dispatcher.dispatch("bad-input-payment", b"not json")).await;
    assert!(dispatched.expect("the dispatcher gave up at the timeout").is_err(), "do not ack");
    let mut tasks = Vec::new();
    for n in 0..20 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move { store.park(letter("payment", n)).await }));
    }
    let all = async {
        for task in tasks {
            assert!(task.await.unwrap().is_err());
        }
    };
    tokio::time::timeout(PATIENCE, all).await.expect("twenty parks gave up at the timeout");
}

/// A park that timed out while its insert waited (here on a lock the test holds) still lands
/// once the insert goes on, as `PgConfig::park_timeout` warns. The caller was told
/// `ParkFailed` and did not acknowledge, so the broker redelivers the event with the same
/// source: that park finds the row that landed by its dedupe key and returns its id, and the
/// event has one row, not two.
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn a_redelivery_finds_the_row_of_a_park_that_timed_out_and_landed(pool: PgPool) {
    let store = store_with(&pool, PgConfig::default().park_timeout(Duration::from_secs(3))).await;
    store.park(letter("warm-up", 0)).await.expect("the writer's connection is made");
    let shared: Arc<dyn DeadLetterStore> = Arc::new(store);
    let from = SourceMeta::kafka("payments", 0, 42);
    let deliver = || {
        let scope = Scope::new().store(shared.clone()).source(from.clone());
        scope.run(handle_payment(Payment { id: 1, currency: "USD ".into() }))
    };
    let rows = |pool: PgPool| async move {
        sqlx::query_scalar::<_, i64>("SELECT id FROM dlq_events WHERE dedupe_key = 'payments/0/42'")
            .fetch_all(&pool)
            .await
            .unwrap()
    };

    // Inserts into the table wait while it is locked in SHARE mode.
    let mut lock = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE dlq_events IN SHARE MODE").execute(&mut *lock).await.unwrap();
    let first = tokio::spawn(deliver());
    // The park's insert is sent and waits on the lock (seen by the server) before it times out.
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'";
    while sqlx::query_scalar::<_, i64>(waiting).fetch_one(&pool).await.unwrap() == 0 {
        assert!(!first.is_finished(), "the park ended before its insert waited on the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let first = first.await.unwrap();
    assert!(
        matches!(&first, Err(HandlerError::ParkFailed { store_error: dlq_core::Error::Timeout(_), .. })),
        "{first:?}"
    );
    lock.commit().await.unwrap();
    // The waiting insert gets the table at once; a SHARE lock conflicts with the one it holds
    // until it commits, so taking it again waits for that commit.
    let mut after = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE dlq_events IN SHARE MODE").execute(&mut *after).await.unwrap();
    after.commit().await.unwrap();
    let landed = rows(pool.clone()).await;
    assert_eq!(landed.len(), 1, "the park that timed out landed");

    let again = deliver().await.unwrap_err();
    assert!(matches!(again, HandlerError::Parked { .. }), "{again:?}");
    assert_eq!(again.dlq_id(), Some(landed[0]), "the redelivery found the row that landed");
    assert_eq!(rows(pool).await, landed, "one row, not two");
}

/// JSON that `jsonb` holds and serde cannot read (`1e400`, here written by another client) is
/// read as its text: a claim gets the payload raw (the retrier then parks it dead
/// `undecodable`) rather than failing its whole batch; the row's error chain says why it
/// cannot be shown, its headers are none, an audit diff is its text, and a catalog schema that
/// cannot be read is none. Each once failed with "error occurred while decoding column".
#[sqlx::test(migrator = "dlq_sqlx::postgres::MIGRATOR")]
async fn jsonb_that_serde_cannot_read_is_read_as_its_text(pool: PgPool) {
    let store = store(&pool).await;
    let id = store.park(letter("odd", 1)).await.unwrap().id;
    let far = r#"UPDATE dlq_events SET payload = '{"n": 1e400}', error_chain = '[1e400]', source_headers = '{"h": 1e400}'
        WHERE id = $1"#;
    sqlx::query(far).bind(id).execute(&pool).await.unwrap();
    let audit = "INSERT INTO dlq_audit (dlq_id, action, actor, diff) VALUES ($1, 'patch', 'sql', '[1e400]')";
    sqlx::query(audit).bind(id).execute(&pool).await.unwrap();
    store.publish_types(vec![dlq_core::catalog::EventTypeInfo::new("odd", 2, "host:1")]).await.unwrap();
    let schemas = r#"UPDATE dlq_event_types SET json_schema = '{"maximum": 1e400}', older_schemas = '{"1": [1e400]}'"#;
    sqlx::query(schemas).execute(&pool).await.unwrap();

    let far_text = format!("{{\"n\": 1{}}}", "0".repeat(400)).into_bytes();
    let row = store.list(ListFilter::default()).await.unwrap().remove(0);
    assert_eq!(row.payload, Payload::Raw { bytes: far_text.clone(), truncated: None });
    assert!(row.payload.raw_note().unwrap().starts_with("not JSON that serde can read: number out of range"));
    assert!(row.failure.chain[0].contains("not JSON serde reads: number out of range"), "{:?}", row.failure.chain);
    assert!(row.source.headers.is_empty());
    let diff = store.audit(id).await.unwrap().remove(0).diff;
    assert_eq!(diff, serde_json::json!(format!("[1{}]", "0".repeat(400))));
    let catalog = store.event_types().await.unwrap();
    assert_eq!((catalog[0].schema.as_ref(), catalog[0].older_schemas.len()), (None, 0), "no schema to check by");

    let claimed = claim(&store, &["odd"], 10).await;
    assert_eq!(claimed[0].payload, Payload::Raw { bytes: far_text, truncated: None });
}
