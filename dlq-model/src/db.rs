//! The database: rows of `dlq_events`, one stored operation, and the statements of
//! `dlq-sqlx/src/pg/sql` as transitions of it. Each statement is one transaction and runs
//! atomically here, as row locks make it run in PostgreSQL (`FOR UPDATE`, `SKIP LOCKED`, the
//! unique index's wait): what the model interleaves is the statements, not their insides.

use crate::{Mutation, Operation};

/// A row's status (`dlq_core::Status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Due for a retry.
    Pending,
    /// Claimed under a lease.
    Processing,
    /// Finished: the retry succeeded.
    Succeeded,
    /// Dead: waits for an operator.
    FailedPermanently,
    /// Finished: an operator discarded it.
    Discarded,
}

impl Status {
    /// `PENDING`, `PROCESSING`, `FAILED_PERMANENTLY`: the rows the dedupe index covers.
    pub const fn live(self) -> bool {
        !matches!(self, Self::Succeeded | Self::Discarded)
    }
}

/// One row of `dlq_events`, with the columns the protocol reads.
///
/// The event type is one (`payment`); `event` is the dedupe key and the subject alike (event
/// `e` is parked under key `e`, holding subject `e`). The fields named `seen_*` are ghost
/// state: written by the model to state properties, never read by a statement.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    /// The row's id (`bigserial`: never reused).
    pub id: u8,
    /// The event it holds (its dedupe key and subject).
    pub event: u8,
    /// Its status.
    pub status: Status,
    /// `lease_token` while claimed (tokens are UUIDs: the model never reuses one).
    pub token: Option<u8>,
    /// Whether `lease_until` has passed (the database's clock).
    pub expired: bool,
    /// `retry_count`.
    pub retry_count: u8,
    /// `redrive_count`.
    pub redrive_count: u8,
    /// The payload, as the number of patches written over the parked one.
    pub payload: u8,
    /// Whether the audit log holds a `patch` entry of the stored operation (its mark).
    pub marked: bool,
    /// Ghost: the token of the row's latest claim.
    pub seen_claim: Option<u8>,
    /// Ghost: whether an outcome was written under that claim.
    pub seen_settled: bool,
    /// Ghost: how many times the stored operation moved or patched the row.
    pub seen_moves: u8,
}

/// The stored operation (`dlq_operations`): its cursor, the last id its batches covered.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StoredOperation {
    /// `cursor_id`.
    pub cursor: u8,
}

/// The tables at one commit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Db {
    /// `dlq_events`, by id.
    pub rows: Vec<Row>,
    /// The id sequence's next value.
    pub next_id: u8,
    /// The one stored operation, created before the model starts (`Admin::start`).
    pub operation: StoredOperation,
}

/// What a park statement (`park.sql`, `ON CONFLICT ... DO NOTHING`) answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// A new row.
    Row(u8),
    /// Skipped: a row the dedupe index covers holds the key; the caller looks it up.
    Skipped,
}

/// An outcome a retrier writes (`Settlement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// `SUCCEEDED`.
    Succeeded,
    /// `PENDING` again, `retry_count + 1` (due at once: delays are abstracted away).
    Retry,
    /// `FAILED_PERMANENTLY`, `retry_count + 1` (every dead end the retrier decides counts).
    Dead,
}

/// What one batch of the stored operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchResult {
    /// Committed: the cursor moved to the batch's last id (the row moved, or was refused).
    Committed,
    /// The cursor's compare-and-set failed (`Error::Conflict`): rolled back.
    Conflict,
}

impl Db {
    /// No rows; the operation at cursor 0.
    pub const fn new() -> Self {
        Self { rows: Vec::new(), next_id: 1, operation: StoredOperation { cursor: 0 } }
    }

    /// The row `id`.
    pub fn row(&self, id: u8) -> Option<&Row> {
        self.rows.iter().find(|r| r.id == id)
    }

    fn row_mut(&mut self, id: u8) -> Option<&mut Row> {
        self.rows.iter_mut().find(|r| r.id == id)
    }

    /// Whether the dedupe index (`(event_type, dedupe_key) WHERE status NOT IN ('SUCCEEDED',
    /// 'DISCARDED')`, migration 0017) covers a row in `status`.
    fn indexed(status: Status, mutation: Option<Mutation>) -> bool {
        match mutation {
            Some(Mutation::DedupeIndexPendingOnly) => status == Status::Pending,
            _ => status.live(),
        }
    }

    /// `park.sql` for one letter: inserts a `PENDING` row unless the dedupe index holds its
    /// key (`ON CONFLICT DO NOTHING`).
    pub fn park(&mut self, event: u8, mutation: Option<Mutation>) -> Inserted {
        if self.rows.iter().any(|r| r.event == event && Self::indexed(r.status, mutation)) {
            return Inserted::Skipped;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.rows.push(Row {
            id,
            event,
            status: Status::Pending,
            token: None,
            expired: false,
            retry_count: 0,
            redrive_count: 0,
            payload: 0,
            marked: false,
            seen_claim: None,
            seen_settled: false,
            seen_moves: 0,
        });
        Inserted::Row(id)
    }

    /// `dedupe_lookup.sql`: the live row holding the key, if one still does.
    pub fn dedupe_lookup(&self, event: u8) -> Option<u8> {
        self.rows.iter().find(|r| r.event == event && r.status.live()).map(|r| r.id)
    }

    /// Whether `claim_rows.sql` may take the row: `PENDING` (due: delays are abstracted
    /// away) or `PROCESSING` with an expired lease.
    pub fn claimable(row: &Row, mutation: Option<Mutation>) -> bool {
        match row.status {
            Status::Pending => true,
            Status::Processing => row.expired && mutation != Some(Mutation::ClaimSkipsExpiredLeases),
            _ => false,
        }
    }

    /// `claim_rows.sql` for one row: `PROCESSING` under the fresh `token`, lease running.
    pub fn claim(&mut self, id: u8, token: u8) -> Option<u8> {
        let row = self.row_mut(id)?;
        row.status = Status::Processing;
        row.token = Some(token);
        row.expired = false;
        row.seen_claim = Some(token);
        row.seen_settled = false;
        Some(row.retry_count)
    }

    /// `settle_rows.sql` for one outcome: written only while `token` holds the row
    /// (`lease_token = token AND status = 'PROCESSING' AND lease_until > now()`). Returns
    /// `None` when fenced, otherwise whether the outcome applied under a stale claim (the
    /// ghost check: a claim that is not the row's latest, or already settled, or expired).
    pub fn settle(&mut self, id: u8, token: u8, outcome: Outcome, mutation: Option<Mutation>) -> Option<bool> {
        let row = self.row_mut(id)?;
        let token_holds = mutation == Some(Mutation::SettleWithoutToken) || row.token == Some(token);
        if !(token_holds && row.status == Status::Processing && !row.expired) {
            return None;
        }
        let stale = row.seen_claim != Some(token) || row.seen_settled;
        row.seen_settled = true;
        row.token = None;
        match outcome {
            Outcome::Succeeded => row.status = Status::Succeeded,
            Outcome::Retry => {
                row.status = Status::Pending;
                row.retry_count += 1;
            }
            Outcome::Dead => {
                row.status = Status::FailedPermanently;
                row.retry_count += 1;
            }
        }
        Some(stale)
    }

    /// The lease of row `id` under `token` passes (`lease_until <= now()`).
    pub fn expire(&mut self, id: u8, token: u8) {
        if let Some(row) = self.row_mut(id).filter(|r| r.token == Some(token)) {
            row.expired = true;
        }
    }

    /// Whether the operation's filter selects the row (`Admin::select`, a plain read).
    pub const fn selects(operation: Operation, row: &Row) -> bool {
        match operation {
            Operation::Redrive => matches!(row.status, Status::FailedPermanently),
            Operation::Discard => true,
            Operation::Patch => matches!(row.status, Status::Pending | Status::FailedPermanently),
        }
    }

    /// The next row the operation's batch of one takes after `cursor`, with the payload the
    /// patch is computed from.
    pub fn select(&self, operation: Operation, cursor: u8) -> Option<(u8, u8)> {
        self.rows.iter().filter(|r| r.id > cursor && Self::selects(operation, r)).map(|r| (r.id, r.payload)).next()
    }

    /// One batch of the stored operation: `apply` (`action_lock.sql`, `refusal`,
    /// `redrive_ids.sql` or `discard_ids.sql`) or `patch_rows` (`patch_rows_lock.sql`, the
    /// mark of `patch_rows_marked.sql`, the payload check, `patch_rows_write.sql`), with the
    /// cursor's compare-and-set (`op_advance.sql`) from `from` to `id`, in one transaction.
    pub fn apply_batch(
        &mut self,
        operation: Operation,
        from: u8,
        id: u8,
        payload_seen: u8,
        mutation: Option<Mutation>,
    ) -> BatchResult {
        let cas = !matches!(
            (operation, mutation),
            (_, Some(Mutation::NoCursorCas)) | (Operation::Patch, Some(Mutation::PatchWithoutMarkOrCas))
        );
        if cas && self.operation.cursor != from {
            return BatchResult::Conflict;
        }
        let marks = !matches!(mutation, Some(Mutation::PatchWithoutMark | Mutation::PatchWithoutMarkOrCas));
        if let Some(row) = self.row_mut(id) {
            match operation {
                Operation::Redrive if row.status == Status::FailedPermanently => {
                    row.status = Status::Pending;
                    row.retry_count = 0;
                    row.redrive_count += 1;
                    row.seen_moves += 1;
                }
                Operation::Discard if matches!(row.status, Status::Pending | Status::FailedPermanently) => {
                    row.status = Status::Discarded;
                    row.seen_moves += 1;
                }
                Operation::Patch
                    if !matches!(row.status, Status::Processing | Status::Succeeded)
                        && (!marks || !row.marked)
                        && row.payload == payload_seen =>
                {
                    row.payload += 1;
                    row.marked = true;
                    row.seen_moves += 1;
                }
                _ => {}
            }
        }
        self.operation.cursor = id;
        BatchResult::Committed
    }

    /// `purge.sql` (all slices): deletes the finished rows (their age is abstracted away: any
    /// finished row may be past it). Returns the ids deleted and whether one was live.
    pub fn purge(&mut self, mutation: Option<Mutation>) -> (Vec<u8>, bool) {
        let purged = |r: &Row| match mutation {
            Some(Mutation::PurgeDeadRows) => !matches!(r.status, Status::Pending | Status::Processing),
            _ => matches!(r.status, Status::Succeeded | Status::Discarded),
        };
        let gone: Vec<u8> = self.rows.iter().filter(|r| purged(r)).map(|r| r.id).collect();
        let live = self.rows.iter().any(|r| purged(r) && r.status.live());
        self.rows.retain(|r| !purged(r));
        (gone, live)
    }

    /// `erase.sql`: deletes every row of the subject, in any status (rows locked, not
    /// skipped). Returns the ids deleted.
    pub fn erase(&mut self, subject: u8) -> Vec<u8> {
        let gone: Vec<u8> = self.rows.iter().filter(|r| r.event == subject).map(|r| r.id).collect();
        self.rows.retain(|r| r.event != subject);
        gone
    }
}

impl Default for Db {
    fn default() -> Self {
        Self::new()
    }
}
