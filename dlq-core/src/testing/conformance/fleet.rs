//! The fleet ([`FleetStore`]): heartbeats, circuits and the type catalog.

use super::*;

/// The type catalog keeps one record per event type, every field as published (schemas by
/// version, redacted pointers, time to the microsecond); a record of the same or a newer version
/// replaces the stored one, an older version changes nothing (a rolling deploy's old process
/// starting late), and a batch naming a type twice keeps the newest.
pub async fn type_catalog_newest_version_wins<S: DeadLetterStore + ?Sized>(s: &S) {
    use crate::catalog::EventTypeInfo;
    assert!(s.event_types().await.expect("event_types").is_empty());
    s.publish_types(Vec::new()).await.expect("nothing to publish");
    let mut payment = EventTypeInfo::new("payment", 3, "host:1:new");
    payment.schema = Some(serde_json::json!({"type": "object", "required": ["cents"]}));
    payment.older_schemas = [(1, serde_json::json!({"type": "object"}))].into();
    payment.upcast_from = 1;
    payment.encrypted = true;
    payment.redact = vec!["/card/number".into(), "/name".into()];
    let refund = EventTypeInfo::new("refund", 1, "host:1:new");
    s.publish_types(vec![refund.clone(), payment.clone()]).await.expect("publish");
    assert_eq!(s.event_types().await.expect("event_types"), [payment.clone(), refund.clone()], "by event type");

    let old = EventTypeInfo::new("payment", 2, "host:2:old");
    let newer_refund = EventTypeInfo::new("refund", 2, "host:2:old");
    s.publish_types(vec![old, newer_refund.clone()]).await.expect("publish");
    assert_eq!(s.event_types().await.expect("event_types"), [payment.clone(), newer_refund.clone()]);

    let mut same = EventTypeInfo::new("payment", 3, "host:3:again");
    same.upcast_from = 2;
    let twice = vec![EventTypeInfo::new("card", 2, "a"), EventTypeInfo::new("card", 1, "b"), same.clone()];
    s.publish_types(twice).await.expect("publish");
    let catalog = s.event_types().await.expect("event_types");
    let kept: Vec<_> = catalog.iter().map(|i| (i.event_type.as_str(), i.version, i.published_by.as_str())).collect();
    assert_eq!(kept, [("card", 2, "a"), ("payment", 3, "host:3:again"), ("refund", 2, "host:2:old")]);
    assert_eq!(catalog[1], same, "the same version refreshes the whole record");
}

/// `publish_types` keeps every shape each version of a type was published with
/// (`version_schemas`): a shape new to its version is added, whatever the newest-version rule
/// does with the record (a process that changed its event without bumping its version is seen);
/// a known shape (annotations aside) keeps its first publication and takes the last publisher;
/// `accept_schema` makes one shape its version's only one.
pub async fn type_catalog_keeps_every_shape_of_a_version<S: DeadLetterStore + ?Sized>(s: &S) {
    use crate::catalog::{EventTypeInfo, VersionSchema};
    let at = |n: i64| DateTime::<Utc>::from_timestamp(1_700_000_000 + n, 0).expect("a time");
    let record = |version: u32, by: &str, n: i64| {
        let mut info = EventTypeInfo::new("payment", version, by);
        info.published_at = at(n);
        info
    };
    assert!(s.version_schemas().await.expect("version_schemas").is_empty());
    let cents = json!({"title": "Payment", "type": "object", "required": ["cents"]});
    let mut v1 = record(1, "payments-v1", 0);
    v1.schema = Some(cents);
    let mut v2 = record(2, "payments-v2", 10);
    v2.schema = Some(json!({"type": "object", "required": ["cents", "currency"]}));
    v2.older_schemas = [(1, json!({"title": "PaymentV1", "type": "object", "required": ["cents"]}))].into();
    let mut v3 = record(3, "payments-v3", 5);
    // Upcasters on `serde_json::Value`: schemas that take any JSON, no shape.
    let any_value = json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "AnyValue"});
    v3.older_schemas = [(1, json!(true)), (2, any_value)].into();
    s.publish_types(vec![v3]).await.expect("publish");
    s.publish_types(vec![v1]).await.expect("publish");
    s.publish_types(vec![v2]).await.expect("publish");
    let mut forgot = record(1, "payments-v3", 20);
    forgot.schema = Some(json!({"type": "object", "required": ["amount_cents"]}));
    s.publish_types(vec![forgot.clone()]).await.expect("publish");
    assert_eq!(s.event_types().await.expect("event_types")[0].version, 3, "the newest version's record stays");

    let stored = s.version_schemas().await.expect("version_schemas");
    let seen: Vec<_> =
        stored.iter().map(|v| (v.version, v.first_published_at, v.published_at, v.published_by.as_str())).collect();
    assert_eq!(
        seen,
        [(1, at(0), at(10), "payments-v2"), (1, at(20), at(20), "payments-v3"), (2, at(10), at(10), "payments-v2")],
        "by version, then first publication"
    );
    assert_eq!(stored[1].schema, json!({"type": "object", "required": ["amount_cents"]}), "as published");
    assert_eq!(stored[1].digest, crate::catalog::shape_digest(&stored[1].schema));
    assert_ne!(stored[0].digest, stored[1].digest);

    let accepted = VersionSchema::new("payment", 1, json!({"type": "object", "required": ["amount_cents"]}), "ops");
    s.accept_schema(accepted).await.expect("accept_schema");
    let stored = s.version_schemas().await.expect("version_schemas");
    let seen: Vec<_> = stored.iter().map(|v| (v.version, v.published_by.as_str())).collect();
    assert_eq!(seen, [(1, "ops"), (2, "payments-v2")], "one shape left for version 1");
    s.publish_types(vec![forgot]).await.expect("publish");
    assert_eq!(s.version_schemas().await.expect("version_schemas").len(), 2, "a known shape is not added twice");
}

/// Heartbeat rows: inserted, refreshed (keeping `started_at`), removed, and removed for a
/// retrier that stopped beating.
pub async fn heartbeats_refresh_and_expire<S: DeadLetterStore + ?Sized>(s: &S) {
    let a = crate::admin::RetrierHeartbeat::new("host:1:a", ["payment"], false);
    let b = crate::admin::RetrierHeartbeat::new("host:2:b", ["payment", "refund"], true);
    s.heartbeat(&a, LONG).await.expect("beat a");
    s.heartbeat(&b, LONG).await.expect("beat b");
    let rows = s.retriers().await.expect("retriers");
    assert_eq!(rows.iter().map(|r| r.owner.as_str()).collect::<Vec<_>>(), ["host:1:a", "host:2:b"]);
    assert_eq!((rows[1].event_types.len(), rows[1].singleton), (2, true));
    let started = rows[0].started_at;
    tokio::time::sleep(PAST_SHORT).await;
    s.heartbeat(&a, SHORT).await.expect("beat a again: b is stale");
    let rows = s.retriers().await.expect("retriers");
    assert_eq!(rows.len(), 1, "b stopped beating and was removed");
    assert!(close(rows[0].started_at, started, ROUNDING) && rows[0].last_seen > started);
    s.remove_heartbeat("host:1:a").await.expect("remove");
    assert!(s.retriers().await.expect("retriers").is_empty());
}

/// Circuits: a fresh store has none; a write applies only on the expected version, sets
/// `open_until` from the store's clock, and is logged (newest first) with actor and reason.
pub async fn circuits_compare_and_set<S: DeadLetterStore + ?Sized>(s: &S) {
    use crate::{record::CircuitState, store::Circuit};
    let read = s.circuits().await.expect("circuits");
    assert!(read.circuits.is_empty(), "a fresh store has no circuits");
    let closed = read.get("payment");
    assert_eq!((closed.state, closed.version), (CircuitState::Closed, 0));

    let mut open = closed.write(CircuitState::Open, "retrier-a", "11 of 20 calls failed");
    open.cool_down = Duration::from_secs(30);
    open.open_for = Some(Duration::from_secs(30));
    let written = s.write_circuit(open.clone()).await.expect("write").expect("version 0 matches");
    assert_eq!((written.state, written.version), (CircuitState::Open, 1));
    assert!(s.write_circuit(open).await.expect("write").is_none(), "a stale version writes nothing");

    let read = s.circuits().await.expect("circuits");
    let stored: Circuit = read.get("payment");
    assert_eq!((stored.state, stored.version, stored.cool_down), (CircuitState::Open, 1, Duration::from_secs(30)));
    let until = stored.open_until.expect("open_until");
    let left = (until - read.at).to_std().unwrap_or_default();
    assert!(left > Duration::from_secs(25) && left <= Duration::from_secs(30), "open for the cool-down: {left:?}");
    assert_eq!(stored.reason.as_deref(), Some("11 of 20 calls failed"));
    assert_eq!(read.get("refund").version, 0, "other types untouched");

    let mut pause = stored.write(CircuitState::Open, "alice", "ledger migration");
    pause.paused = true;
    pause.paused_by = Some("alice".into());
    pause.pause_reason = Some("ledger migration".into());
    pause.logged_as = "paused";
    let paused = s.write_circuit(pause).await.expect("write").expect("version 1 matches");
    assert!(paused.paused && paused.version == 2 && paused.paused_by.as_deref() == Some("alice"));

    let log = s.circuit_log(Some("payment".into()), 10).await.expect("log");
    let steps: Vec<_> = log.iter().map(|e| (e.from.as_str(), e.to.as_str(), e.actor.as_str())).collect();
    assert_eq!(steps, [("open", "paused", "alice"), ("closed", "open", "retrier-a")], "newest first");
    assert_eq!(log[0].reason, "ledger migration");
    assert!(s.circuit_log(Some("refund".into()), 10).await.expect("log").is_empty());
    assert_eq!(s.circuit_log(None, 1).await.expect("log").len(), 1, "limit");
}

/// Eight retriers race for the trial of an open circuit: exactly one wins.
pub async fn circuit_trial_taken_once<S: DeadLetterStore + ?Sized>(s: &S) {
    use crate::record::CircuitState;
    let closed = s.circuits().await.expect("circuits").get("payment");
    let mut open = closed.write(CircuitState::Open, "retrier-a", "down");
    open.open_for = Some(Duration::ZERO);
    let open = s.write_circuit(open).await.expect("write").expect("opened");
    // Eight retrier processes see the cool-down over and race for the trial.
    let races = (0..8).map(|i| {
        let mut trial = open.write(CircuitState::HalfOpen, &format!("retrier-{i}"), "cool-down over");
        trial.trial_owner = Some(format!("retrier-{i}"));
        trial.trial_for = Some(LONG);
        s.write_circuit(trial)
    });
    let results = futures_util::future::join_all(races).await;
    let winners: Vec<_> = results.into_iter().filter_map(|r| r.expect("write")).collect();
    assert_eq!(winners.len(), 1, "exactly one retrier holds the trial");
    let stored = s.circuits().await.expect("circuits").get("payment");
    assert_eq!((stored.state, stored.trial_owner.clone()), (CircuitState::HalfOpen, winners[0].trial_owner.clone()));
    assert!(stored.trial_until.is_some());
}
