//! What `#[dead_letter]` costs when the handler succeeds: the annotated handler against the
//! same function without the attribute. The wrapper must add no I/O and at most a few percent.
//!
//! Run: `cargo bench -p dlq-core --bench happy_path`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use dlq_core::dead_letter;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Payment {
    id: u64,
    amount_cents: i64,
    currency: String,
    merchant: String,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid payment {0}")]
struct Invalid(u64);

/// The work a small real handler does: validate and hash the fields.
fn validate(p: &Payment) -> Result<u64, Invalid> {
    if p.currency.len() != 3 || p.currency.trim() != p.currency || p.amount_cents <= 0 {
        return Err(Invalid(p.id));
    }
    let mut h = 0xcbf2_9ce4_8422_2325_u64;
    for b in p.currency.bytes().chain(p.merchant.bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    Ok(h ^ p.id ^ p.amount_cents.unsigned_abs())
}

async fn plain(p: Payment) -> Result<u64, Invalid> {
    validate(&p)
}

#[dead_letter(event_type = "bench-payment", max_retries = 240, backoff = "exp")]
async fn annotated(p: Payment) -> Result<u64, Invalid> {
    validate(&p)
}

/// A handler that does about a microsecond of work per event, as hydration or validation
/// against reference data would (an FNV hash over 4 KiB here), without I/O.
fn work(p: &Payment, reference: &[u8]) -> Result<u64, Invalid> {
    let mut h = validate(p)?;
    for b in reference {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    Ok(h)
}

static REFERENCE: [u8; 4096] = [7; 4096];

async fn plain_work(p: Payment) -> Result<u64, Invalid> {
    work(&p, black_box(&REFERENCE))
}

#[dead_letter(event_type = "bench-work")]
async fn annotated_work(p: Payment) -> Result<u64, Invalid> {
    work(&p, black_box(&REFERENCE))
}

async fn plain_noop(n: u64) -> Result<u64, Invalid> {
    Ok(n)
}

#[dead_letter(event_type = "bench-noop")]
async fn annotated_noop(n: u64) -> Result<u64, Invalid> {
    Ok(n)
}

fn payment() -> Payment {
    Payment { id: 42, amount_cents: 1999, currency: "USD".into(), merchant: "ACME Coffee Roasters".into() }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut g = c.benchmark_group("handler succeeds");
    g.bench_function("plain fn, payment", |b| {
        b.to_async(&rt).iter(|| async { black_box(plain(black_box(payment())).await) })
    });
    g.bench_function("#[dead_letter], payment", |b| {
        b.to_async(&rt).iter(|| async { black_box(annotated(black_box(payment())).await.ok()) });
    });
    g.bench_function("plain fn, payment + 4 KiB of work", |b| {
        b.to_async(&rt).iter(|| async { black_box(plain_work(black_box(payment())).await) });
    });
    g.bench_function("#[dead_letter], payment + 4 KiB of work", |b| {
        b.to_async(&rt).iter(|| async { black_box(annotated_work(black_box(payment())).await.ok()) });
    });
    g.bench_function("plain fn, u64 no-op", |b| {
        b.to_async(&rt).iter(|| async { black_box(plain_noop(black_box(7)).await) })
    });
    g.bench_function("#[dead_letter], u64 no-op", |b| {
        b.to_async(&rt).iter(|| async { black_box(annotated_noop(black_box(7)).await.ok()) });
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
