//! What `encrypt = true` costs: parking failures through the live path, and a retrier draining
//! them, with encryption on and off, in one run on `MemoryStore` (no I/O, so the cipher's
//! share is as large as it gets; on a database it is smaller). Targets: park ≥ 0.9×, retry ≥
//! 0.9× of the same without encryption.
//!
//! Run: `cargo bench -p dlq-core --bench sealed`
//!
//! One phase once, for `valgrind --tool=callgrind` (instruction counts do not depend on the
//! machine's load): `DLQ_SEALED_PROFILE="park encrypted"` (or `park clear`, `retry ...`: a
//! park of `ROWS` rows, then for `retry` their drain) and the bench binary
//! (`cargo bench -p dlq-core --bench sealed --no-run` names it).

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use dlq_core::sealed::KeyRing;
use dlq_core::{MemoryStore, Retrier, Scope, dead_letter, handlers, handlers::Attempt};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
    pan: String,
    merchant: String,
}

fn payment(id: u64) -> Payment {
    Payment {
        id,
        amount_cents: 1_299,
        currency: "EUR".into(),
        pan: "4111111111111111".into(),
        merchant: "a merchant with a reasonably long name, as they come".into(),
    }
}

/// Fails live, succeeds when retried.
#[dead_letter(event_type = "bench-clear", backoff = "none")]
async fn clear(p: Payment, attempt: Attempt) -> Result<(), std::io::Error> {
    if attempt.id.is_none() { Err(std::io::Error::other(format!("ledger refused {}", p.pan))) } else { Ok(()) }
}

/// The same, encrypted at rest.
#[dead_letter(event_type = "bench-sealed", encrypt = true, clear = ["/id"], backoff = "none")]
async fn sealed(p: Payment, attempt: Attempt) -> Result<(), std::io::Error> {
    if attempt.id.is_none() { Err(std::io::Error::other(format!("ledger refused {}", p.pan))) } else { Ok(()) }
}

const ROWS: u64 = 1_000;

fn keys() -> KeyRing {
    KeyRing::new("k1", [("k1", [7; 32])]).unwrap()
}

/// Parks `ROWS` failures of one handler into a fresh store; returns the time and the store.
async fn park(encrypted: bool) -> (Duration, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    // One ring, as an application loads it once.
    let ring = keys();
    let scope = || Scope::new().store(store.clone()).keys(ring.clone());
    let start = Instant::now();
    for id in 0..ROWS {
        let parked = if encrypted {
            scope().run(sealed(payment(id), Attempt::first())).await.is_err()
        } else {
            scope().run(clear(payment(id), Attempt::first())).await.is_err()
        };
        assert!(parked);
    }
    (start.elapsed(), store)
}

/// Drains a store of `ROWS` parked failures with a retrier; returns the time.
async fn drain(encrypted: bool, store: Arc<MemoryStore>) -> Duration {
    let registry = if encrypted { handlers![sealed] } else { handlers![clear] }.unwrap();
    let mut config = dlq_core::RetrierConfig::default();
    config.batch_size = 100;
    let retrier = Retrier::new(store, registry).config(config).keys(keys());
    let start = Instant::now();
    let mut done = 0;
    while done < ROWS as usize {
        done += retrier.run_once().await.unwrap();
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut group = c.benchmark_group("sealed");
    group.throughput(criterion::Throughput::Elements(ROWS));
    for (name, encrypted) in [("clear", false), ("encrypted", true)] {
        group.bench_function(format!("park/{name}"), |b| {
            b.iter_custom(|iters| rt.block_on(async { futures_sum((0..iters).map(|_| park(encrypted))).await }));
        });
        group.bench_function(format!("retry/{name}"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let (_, store) = park(encrypted).await;
                        total += drain(encrypted, store).await;
                    }
                    total
                })
            });
        });
    }
    group.finish();
    // Where a sealed park's time goes: a park's one seal (payload and failure), a payload's seal and open alone.
    let ring = keys();
    let event = dlq_core::Payload::from_event(&payment(1)).unwrap();
    c.bench_function("sealed/seal_payload", |b| {
        b.iter(|| dlq_core::sealed::seal_payload(&ring, "bench-sealed", &event, &["/id"]).unwrap());
    });
    let failure = dlq_core::classify::FailureInfo::new(
        dlq_core::ErrorClass::Transient,
        "io",
        "ledger refused 4111111111111111".into(),
        vec!["ledger refused 4111111111111111".into()],
        None,
    );
    let sealing = dlq_core::sealed::Sealing::new(&["/id"]);
    c.bench_function("sealed/seal_row", |b| {
        b.iter(|| dlq_core::sealed::seal_row(&ring, "bench-sealed", &event, failure.clone(), sealing).unwrap());
    });
    let stored = dlq_core::sealed::seal_payload(&ring, "bench-sealed", &event, &["/id"]).unwrap();
    c.bench_function("sealed/open_payload", |b| {
        b.iter(|| dlq_core::sealed::open_payload(&ring, "bench-sealed", stored.clone()).unwrap());
    });
}

/// The parks' times added up, one after the other.
async fn futures_sum<F: std::future::Future<Output = (Duration, Arc<MemoryStore>)>>(
    runs: impl Iterator<Item = F>,
) -> Duration {
    let mut total = Duration::ZERO;
    for run in runs {
        total += run.await.0;
    }
    total
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10).measurement_time(Duration::from_secs(5));
    targets = bench
}

fn main() {
    if let Ok(profile) = std::env::var("DLQ_SEALED_PROFILE") {
        let (phase, mode) = profile.split_once(' ').unwrap_or((&profile, "encrypted"));
        let encrypted = mode == "encrypted";
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let (_, store) = park(encrypted).await;
            if phase == "retry" {
                drain(encrypted, store).await;
            }
        });
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
