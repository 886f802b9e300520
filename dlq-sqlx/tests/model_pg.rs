//! Model test: random sequences of park / claim / settle / expire / redrive / discard run on
//! `PgStore` and on `MemoryStore` (the reference model) must agree after every step: the
//! same dedupe answers, the same claimed rows in the same order, the same fenced outcomes,
//! the same rows moved and refused (and why) by each operator batch (`apply`, the primitive
//! of the admin layer's actions), and the same status, retry count, dead reason and redrive
//! count for every row; at the end of each case, the same attempt history and audit log.
//!
//! "Expire" is a claim with a lease of 0 ms: the row is `PROCESSING` under a lease that has
//! already run out, so a later claim takes it again and an outcome presented with it is fenced.

use std::collections::HashMap;
use std::time::Duration;

use dlq_core::store::{ActionKind, BatchAction, BatchReport, ClaimRequest, Claimed, Lease, Refused, Settlement};
use dlq_core::{
    DlqId, ErrorClass, ListFilter, MemoryStore, Payload, Status, adapter::DeadReason, classify::FailureInfo,
    store::AuditNote, store::NewDeadLetter, store::prelude::*,
};
use dlq_sqlx::{PgConfig, PgStore};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sqlx::PgPool;

const TYPES: [&str; 2] = ["a", "b"];
const LATER: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone)]
enum Op {
    /// Park a letter of `TYPES[ty]`, dead on arrival or due now or in an hour, maybe with a
    /// dedupe key drawn from a small set (so keys collide).
    Park { ty: usize, dead: bool, later: bool, dedupe: Option<u8> },
    /// Claim up to `limit` rows of the types in the bit mask; `expiring` claims with a 0 ms lease.
    Claim { types: u8, limit: usize, expiring: bool },
    /// Settle with one of the leases handed out so far (live, spent or expired).
    Settle { pick: usize, outcome: Outcome },
    /// Redrive `count` rows parked one after the other from the `from`th (whatever their
    /// status), with the loop guard at one redrive or without it.
    Redrive { from: usize, count: usize, guard: bool },
    /// Discard one row.
    Discard { pick: usize },
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Succeed,
    Retry { later: bool },
    Dead { counts: bool },
    Release,
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        3 => Just(Outcome::Succeed),
        4 => any::<bool>().prop_map(|later| Outcome::Retry { later }),
        2 => any::<bool>().prop_map(|counts| Outcome::Dead { counts }),
        1 => Just(Outcome::Release),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let park =
        (0..TYPES.len(), prop::bool::weighted(0.2), prop::bool::weighted(0.2), prop::option::weighted(0.3, 0..4u8))
            .prop_map(|(ty, dead, later, dedupe)| Op::Park { ty, dead, later, dedupe });
    let claim = (0..4u8, 1..4usize, prop::bool::weighted(0.3)).prop_map(|(types, limit, expiring)| Op::Claim {
        types,
        limit,
        expiring,
    });
    prop_oneof![
        4 => park,
        3 => claim,
        4 => (any::<usize>(), outcome()).prop_map(|(pick, outcome)| Op::Settle { pick, outcome }),
        1 => (any::<usize>(), 1..4usize, any::<bool>()).prop_map(|(from, count, guard)| Op::Redrive { from, count, guard }),
        1 => any::<usize>().prop_map(|pick| Op::Discard { pick }),
    ]
}

/// Both stores, and what the test has handed out: row ids (memory, pg) and leases.
struct Pair<'a> {
    mem: MemoryStore,
    pg: &'a PgStore,
    /// Memory id → pg id, in park order.
    rows: Vec<(DlqId, DlqId)>,
    to_mem: HashMap<DlqId, DlqId>,
    leases: Vec<(Lease, Lease)>,
    step: usize,
}

fn failure(step: usize) -> FailureInfo {
    FailureInfo::new(ErrorClass::Transient, "io", format!("down at step {step}"), vec![], None)
}

fn request(mask: u8, limit: usize, expiring: bool) -> ClaimRequest {
    let event_types = TYPES.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, t)| (*t).into());
    let lease = if expiring { Duration::ZERO } else { Duration::from_secs(60) };
    ClaimRequest { event_types: event_types.collect(), limit, lease, owner: "model".into() }
}

fn settlement(outcome: Outcome, lease: Lease, step: usize) -> Settlement {
    match outcome {
        Outcome::Succeed => Settlement::Succeeded { lease },
        Outcome::Retry { later } => {
            Settlement::Retry { lease, delay: if later { LATER } else { Duration::ZERO }, failure: failure(step) }
        }
        Outcome::Dead { counts } => {
            let reason = if counts { DeadReason::RetriesExhausted } else { DeadReason::Permanent };
            Settlement::Dead { lease, reason, failure: failure(step), counts }
        }
        Outcome::Release => Settlement::Release { lease },
    }
}

type Checked = Result<(), TestCaseError>;

fn store_err(e: dlq_core::Error) -> TestCaseError {
    TestCaseError::fail(format!("store error: {e}"))
}

impl Pair<'_> {
    fn mem_ids(&self, pg_ids: impl IntoIterator<Item = DlqId>) -> Vec<Option<DlqId>> {
        pg_ids.into_iter().map(|id| self.to_mem.get(&id).copied()).collect()
    }

    async fn park(&mut self, ty: usize, dead: bool, later: bool, dedupe: Option<u8>) -> Checked {
        let payload = Payload::Json(serde_json::json!({ "step": self.step }));
        let mut letter = NewDeadLetter::new(TYPES[ty], payload, failure(self.step));
        letter = letter.retry(if later { LATER } else { Duration::ZERO }, 5);
        if dead {
            letter = letter.dead(DeadReason::Permanent);
        }
        if let Some(key) = dedupe {
            letter = letter.with_dedupe_key(format!("key-{key}"));
        }
        let m = self.mem.park(letter.clone()).await.map_err(store_err)?;
        let p = self.pg.park(letter).await.map_err(store_err)?;
        prop_assert_eq!(m.deduplicated, p.deduplicated, "dedupe answer");
        if m.deduplicated {
            prop_assert_eq!(self.to_mem.get(&p.id), Some(&m.id), "deduplicated to the same row");
        } else {
            self.rows.push((m.id, p.id));
            self.to_mem.insert(p.id, m.id);
        }
        Ok(())
    }

    async fn claim(&mut self, mask: u8, limit: usize, expiring: bool) -> Checked {
        let m: Vec<Claimed> = self.mem.claim(request(mask, limit, expiring)).await.map_err(store_err)?;
        let p: Vec<Claimed> = self.pg.claim(request(mask, limit, expiring)).await.map_err(store_err)?;
        let m_ids: Vec<_> = m.iter().map(|c| Some(c.lease.id)).collect();
        prop_assert_eq!(m_ids, self.mem_ids(p.iter().map(|c| c.lease.id)), "claimed rows, in order");
        self.leases.extend(m.iter().zip(&p).map(|(m, p)| (m.lease, p.lease)));
        Ok(())
    }

    async fn settle(&mut self, pick: usize, outcome: Outcome) -> Checked {
        if self.leases.is_empty() {
            return Ok(());
        }
        let (m_lease, p_lease) = self.leases[pick % self.leases.len()];
        let m = self.mem.settle(vec![settlement(outcome, m_lease, self.step)]).await.map_err(store_err)?;
        let p = self.pg.settle(vec![settlement(outcome, p_lease, self.step)]).await.map_err(store_err)?;
        prop_assert_eq!(m.applied, p.applied, "applied outcomes");
        let m_fenced: Vec<_> = m.fenced.iter().map(|id| Some(*id)).collect();
        prop_assert_eq!(m_fenced, self.mem_ids(p.fenced), "fenced outcomes");
        Ok(())
    }

    /// Applies one operator batch to the same rows of both stores; both must move and refuse
    /// the same rows for the same reasons.
    async fn act(&mut self, action: ActionKind, rows: &[(DlqId, DlqId)], max_redrives: Option<u32>) -> Checked {
        let batch = |ids: Vec<DlqId>| BatchAction {
            action,
            ids,
            note: AuditNote::new("model", "model step"),
            max_redrives,
            step: None,
        };
        let m = self.mem.apply(batch(rows.iter().map(|r| r.0).collect())).await.map_err(store_err)?;
        let p = self.pg.apply(batch(rows.iter().map(|r| r.1).collect())).await.map_err(store_err)?;
        let moved = |r: &BatchReport| r.moved.clone();
        prop_assert_eq!(moved(&m).into_iter().map(Some).collect::<Vec<_>>(), self.mem_ids(moved(&p)), "moved rows");
        let why = |r: &BatchReport| r.refused.iter().map(|f| f.why.clone()).collect::<Vec<Refused>>();
        let refused = |r: &BatchReport| r.refused.iter().map(|f| f.id).collect::<Vec<_>>();
        prop_assert_eq!(refused(&m).into_iter().map(Some).collect::<Vec<_>>(), self.mem_ids(refused(&p)), "refused");
        prop_assert_eq!(why(&m), why(&p), "why refused");
        Ok(())
    }

    async fn redrive(&mut self, from: usize, count: usize, guard: bool) -> Checked {
        if self.rows.is_empty() {
            return Ok(());
        }
        let start = from % self.rows.len();
        let rows: Vec<_> = self.rows.iter().skip(start).take(count).copied().collect();
        self.act(ActionKind::Redrive, &rows, guard.then_some(1)).await
    }

    async fn discard(&mut self, pick: usize) -> Checked {
        if self.rows.is_empty() {
            return Ok(());
        }
        let row = self.rows[pick % self.rows.len()];
        self.act(ActionKind::Discard, &[row], None).await
    }

    async fn apply(&mut self, op: &Op) -> Checked {
        match *op {
            Op::Park { ty, dead, later, dedupe } => self.park(ty, dead, later, dedupe).await,
            Op::Claim { types, limit, expiring } => self.claim(types, limit, expiring).await,
            Op::Settle { pick, outcome } => self.settle(pick, outcome).await,
            Op::Redrive { from, count, guard } => self.redrive(from, count, guard).await,
            Op::Discard { pick } => self.discard(pick).await,
        }
    }

    /// Every row agrees on what the model tracks.
    async fn same_rows(&self) -> Checked {
        type Summary = (Status, u32, Option<DeadReason>, u32, bool);
        let all = ListFilter::default().limit(10_000);
        let summarize = |l: &dlq_core::DeadLetter| -> Summary {
            (l.status, l.retry_count, l.dead_reason, l.redrive_count, l.lease_owner.is_some())
        };
        let m: HashMap<DlqId, Summary> =
            self.mem.list(all.clone()).await.map_err(store_err)?.iter().map(|l| (l.id, summarize(l))).collect();
        let p = self.pg.list(all).await.map_err(store_err)?;
        prop_assert_eq!(m.len(), p.len(), "row count");
        for l in &p {
            let m_id = self.to_mem.get(&l.id).copied();
            prop_assert_eq!(
                m_id.and_then(|id| m.get(&id)),
                Some(&summarize(l)),
                "row pg#{} (memory #{:?})",
                l.id,
                m_id
            );
        }
        self.same_counts().await
    }

    /// `stats` and `groups` agree: PostgreSQL reads them from its tallies (kept by triggers,
    /// folded by `maintain`), the memory store counts its rows.
    async fn same_counts(&self) -> Checked {
        let counts = |rows: Vec<dlq_core::admin::StatsRow>| -> Vec<(String, Status, u64)> {
            rows.into_iter().map(|r| (r.event_type, r.status, r.count)).collect()
        };
        let m = counts(self.mem.stats().await.map_err(store_err)?);
        let p = counts(self.pg.stats().await.map_err(store_err)?);
        prop_assert_eq!(m, p, "stats");
        let groups = |rows: Vec<dlq_core::admin::FailureGroup>| -> Vec<(String, String, u64)> {
            let mut rows: Vec<_> = rows.into_iter().map(|g| (g.event_type, g.fingerprint, g.count)).collect();
            rows.sort();
            rows
        };
        let all = ListFilter::default().limit(1_000);
        let m = groups(self.mem.groups(all.clone()).await.map_err(store_err)?);
        let p = groups(self.pg.groups(all).await.map_err(store_err)?);
        prop_assert_eq!(m, p, "failure groups");
        Ok(())
    }

    /// Every row has the same attempt history and audit log.
    async fn same_history(&self) -> Checked {
        for &(m_id, p_id) in &self.rows {
            let attempt = |a: &dlq_core::admin::AttemptRecord| {
                (a.attempt, a.outcome.clone(), a.error_class.clone(), a.error_reason.clone(), a.owner.clone())
            };
            let m: Vec<_> = self.mem.attempts(m_id).await.map_err(store_err)?.iter().map(attempt).collect();
            let p: Vec<_> = self.pg.attempts(p_id).await.map_err(store_err)?.iter().map(attempt).collect();
            prop_assert_eq!(m, p, "attempts of memory #{}", m_id);
            let audit = |a: &dlq_core::admin::AuditEntry| (a.action.clone(), a.actor.clone(), a.diff.clone());
            let m: Vec<_> = self.mem.audit(m_id).await.map_err(store_err)?.iter().map(audit).collect();
            let p: Vec<_> = self.pg.audit(p_id).await.map_err(store_err)?.iter().map(audit).collect();
            prop_assert_eq!(m, p, "audit of memory #{}", m_id);
        }
        Ok(())
    }
}

async fn run_case(pool: &PgPool, pg: &PgStore, ops: Vec<Op>) -> Checked {
    sqlx::query("TRUNCATE dlq_events, dlq_attempts, dlq_audit RESTART IDENTITY")
        .execute(pool)
        .await
        .map_err(|e| TestCaseError::fail(format!("truncate: {e}")))?;
    let mut pair =
        Pair { mem: MemoryStore::new(), pg, rows: Vec::new(), to_mem: HashMap::new(), leases: Vec::new(), step: 0 };
    for (step, op) in ops.iter().enumerate() {
        pair.step = step;
        pair.apply(op).await?;
        if step % 4 == 3 {
            pg.maintain().await.map_err(store_err)?; // folds the tallies
        }
        pair.same_rows().await?;
    }
    pair.same_history().await
}

#[sqlx::test(migrations = false)]
async fn pg_store_agrees_with_memory_store(pool: PgPool) {
    let pg = PgStore::from_pool(pool.clone(), PgConfig::default()).await.expect("PgStore with migrations");
    let handle = tokio::runtime::Handle::current();
    // proptest drives the cases synchronously: run it on a blocking thread and enter the
    // test's runtime (driven by the test's own thread) for each case.
    let result = tokio::task::spawn_blocking(move || {
        let config = Config { cases: 24, max_shrink_iters: 200, failure_persistence: None, ..Config::default() };
        let mut runner = TestRunner::new(config);
        runner.run(&prop::collection::vec(op(), 1..=30), |ops| handle.block_on(run_case(&pool, &pg, ops)))
    })
    .await
    .expect("the proptest thread");
    if let Err(failure) = result {
        panic!("PgStore and MemoryStore disagree: {failure}");
    }
}
