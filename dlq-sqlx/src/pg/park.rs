//! Parking: payload normalization, the multi-row insert, and group commit.
//!
//! Concurrent parks are handed to writer tasks over a channel. A writer takes every park
//! already queued (and waits up to `linger` for more, up to `max_batch` rows and about
//! `max_batch_bytes`), writes them with one multi-row insert (one `park_many` larger than
//! `max_batch_bytes` alone, as several in one transaction), and answers each caller on its
//! own oneshot with its own ids, only after the commit: the writer answers the first caller
//! of each relay of 16, and each caller passes the answers after its own on as it wakes (see
//! [`deliver`]). With several
//! writers, one collects while another commits. A caller whose park timeout passed gets
//! [`dlq_core::Error::Timeout`]; the writer skips its letters if it has not started writing them.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dlq_core::store::{StoreResult, SubjectHash};
use dlq_core::{Payload, Status, store::NewDeadLetter, store::Parked};
use sqlx::postgres::{PgArguments, PgConnection};
use sqlx::{Arguments, Connection, Row};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::kept_connections::KeptConnections;
use super::notify::Debounce;
use super::park_rows::{ParkRows, encoded_len};
use super::schema::Sql;
use super::{PgConfig, PgStore};

/// A park statement returned no row for a letter (should not happen; reported, not hidden).
#[derive(Debug)]
pub(crate) struct MissingRow;

impl fmt::Display for MissingRow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("park returned no id for a letter")
    }
}

impl std::error::Error for MissingRow {}

/// The group-commit writer stopped (its runtime shut down).
#[derive(Debug)]
struct WriterGone;

impl fmt::Display for WriterGone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the group-commit writer is not running")
    }
}

impl std::error::Error for WriterGone {}

/// One database error reported to every caller of a failed batch.
#[derive(Debug, Clone)]
struct SharedError(Arc<sqlx::Error>);

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.0)
    }
}

/// Parks through the group-commit writer, bounded by the park timeout. The letters are
/// prepared (measured, and cut when over the payload limit) before the timeout starts: that
/// is work in proportion to the payloads, not waiting, and a letter whose preparation ran
/// past the deadline would be sent to the writer only to be answered with a timeout.
pub(crate) async fn park(store: &PgStore, letters: Vec<NewDeadLetter>) -> StoreResult<Vec<Parked>> {
    if letters.is_empty() {
        return Ok(Vec::new());
    }
    let inner = &store.inner;
    let (letters, size) = prepare(letters, inner.config.max_payload_bytes);
    let timeout = inner.config.park_timeout;
    let deadline = Instant::now() + timeout;
    if let Some(capacity) = &inner.capacity {
        // Boxed: admission's database calls would make every park's future (boxed and moved on
        // each call) three times the size, without a capacity limit too.
        Box::pin(capacity.admit(store, letters.len() as u64, deadline)).await?;
    }
    if inner.durability.pending() {
        // The first park of a store that did not run the migrations: the settings are read
        // now (a connection that fails is the writer's to report, and checked next time).
        if let Some(refused) = inner.durability.refused() {
            return Err(refused);
        }
        let check = async {
            match super::nodelay::acquire(&inner.pool).await {
                Ok(mut conn) => inner.durability.check(&mut conn).await,
                Err(_) => Ok(()),
            }
        };
        if let Ok(Err(refused @ dlq_core::Error::Config { .. })) = tokio::time::timeout_at(deadline, check).await {
            return Err(refused);
        }
    }
    if super::park_copy::copyable(&letters) {
        return park_by_copy(store, letters, deadline).await;
    }
    match tokio::time::timeout_at(deadline, inner.writer.submit(letters, size)).await {
        Ok(result) => result,
        Err(_) => Err(dlq_core::Error::Timeout(timeout)),
    }
}

/// Parks many keyless letters through `COPY` ([`super::park_copy`]) on a connection of its
/// own, beside the group-commit writer, until `deadline`. In a task of its own: the park
/// timeout drops this future, and a `COPY` or a transaction dropped halfway would go back to
/// the pool unfinished. A call that timed out may still be stored, as
/// `PgConfig::park_timeout` says.
async fn park_by_copy(store: &PgStore, letters: Vec<NewDeadLetter>, deadline: Instant) -> StoreResult<Vec<Parked>> {
    let inner = &store.inner;
    let wake = letters.iter().any(|l| l.status() == Status::Pending) && inner.debounce.notify_now();
    let (sql, kept) = (Arc::clone(&inner.sql), Arc::clone(&inner.kept_connections));
    // A pool the store did not build may lack the hook that sets TCP_NODELAY.
    let server = (!inner.sets_nodelay).then(|| inner.pool.connect_options());
    let task = tokio::spawn(async move {
        let mut taken = kept.take().await?;
        if let Some(server) = server {
            super::nodelay::set(&server).await;
        }
        let parked = super::park_copy::park(&mut taken.conn, &sql, &letters, wake).await?;
        kept.keep(taken);
        Ok::<_, sqlx::Error>(parked)
    });
    match tokio::time::timeout_at(deadline, task).await {
        Ok(Ok(result)) => result.map_err(dlq_core::Error::store),
        Ok(Err(ended)) => Err(dlq_core::Error::store(sqlx::Error::Protocol(format!("the park task ended: {ended}")))),
        Err(_) => Err(dlq_core::Error::Timeout(inner.config.park_timeout)),
    }
}

/// Makes letters storable: payload within the size limit and acceptable to JSONB, text
/// without NUL bytes (which PostgreSQL `TEXT` rejects). Also returns about how many bytes the
/// letters take in a park statement, which sizes group-commit batches and the statement's buffer.
pub(crate) fn prepare(letters: Vec<NewDeadLetter>, max_payload: usize) -> (Vec<NewDeadLetter>, usize) {
    let mut size = 0;
    let letters = letters
        .into_iter()
        .map(|l| {
            let (letter, len) = prepare_one(l, max_payload);
            size += encoded_len(&letter, len);
            letter
        })
        .collect();
    (letters, size)
}

/// One letter made storable, and its payload's size as stored.
fn prepare_one(mut letter: NewDeadLetter, max_payload: usize) -> (NewDeadLetter, usize) {
    letter.payload = jsonb_storable(letter.payload);
    // The size is measured once, and only up to the limit: a payload over it is cut in one
    // more pass (none for one the live path already cut), whatever its size.
    let len = match letter.payload.len_within(max_payload) {
        Some(len) if !letter.payload.is_truncated() => len,
        _ => {
            letter = letter.fit(max_payload);
            letter.payload.len()
        }
    };
    clean(&mut letter.event_type);
    clean(&mut letter.handler);
    if let Some(key) = &mut letter.dedupe_key {
        clean(key);
    }
    let src = &mut letter.source;
    src.topic.iter_mut().chain(src.trace_context.iter_mut()).for_each(clean);
    if src.headers.iter().any(|(k, v)| k.contains('\0') || v.contains('\0')) {
        src.headers = std::mem::take(&mut src.headers)
            .into_iter()
            .map(|(mut k, mut v)| {
                clean(&mut k);
                clean(&mut v);
                (k, v)
            })
            .collect();
    }
    let f = &mut letter.failure;
    [&mut f.kind, &mut f.reason, &mut f.fingerprint].into_iter().chain(f.chain.iter_mut()).for_each(clean);
    f.stacktrace.iter_mut().for_each(clean);
    (letter, len)
}

/// Replaces NUL characters, which PostgreSQL text and JSONB strings cannot hold.
pub(crate) fn clean(text: &mut String) {
    if text.contains('\0') {
        *text = text.replace('\0', "\u{FFFD}");
    }
}

/// A payload as JSONB can hold it: JSON containing `\u0000` becomes raw bytes.
pub(crate) fn jsonb_storable(payload: Payload) -> Payload {
    if !payload.has_nul_char() {
        return payload;
    }
    // Serializing a `Value` cannot fail: its map keys are strings.
    Payload::Raw { bytes: payload.to_bytes(), truncated: None }
}

/// Inserts prepared letters in one statement on `conn`; ids come back in input order, and a
/// letter whose event type and dedupe key a live row already holds gets that row's id.
/// `size`: about how many bytes they take (from [`prepare`]). `wake`: whether the statement
/// sends the `NOTIFY` for the pending rows it parks.
pub(crate) async fn insert(
    conn: &mut PgConnection,
    sql: &Sql,
    letters: &[NewDeadLetter],
    size: usize,
    wake: bool,
) -> Result<Vec<Parked>, sqlx::Error> {
    let mut parked = insert_once(conn, sql, letters, size, wake).await?;
    // A letter skipped for a live row that finished (a retrier settled it) before the lookup
    // found it is a failure stored nowhere yet: it is parked again, now as a new row.
    for _ in 0..REPARKS {
        let missing: Vec<usize> = (0..parked.len()).filter(|&i| parked[i].is_none()).collect();
        if missing.is_empty() {
            break;
        }
        let again: Vec<NewDeadLetter> = missing.iter().map(|&i| letters[i].clone()).collect();
        let size = again.iter().map(|l| encoded_len(l, l.payload.len())).sum();
        let answers = insert_once(conn, sql, &again, size, wake).await?;
        for (i, answer) in missing.into_iter().zip(answers) {
            parked[i] = answer;
        }
    }
    parked
        .into_iter()
        .zip(letters.iter().map(|l| l.payload.is_truncated()))
        .map(|(p, truncated)| {
            p.map(|p| Parked { truncated, ..p }).ok_or_else(|| sqlx::Error::Protocol("park returned no id".into()))
        })
        .collect()
}

/// How many times a letter whose live row finished under it is parked again before the park
/// is reported as failed (each time another process must have finished the row in between).
const REPARKS: usize = 3;

/// One park statement and the lookup of the letters it skipped; `None` for a letter whose
/// live row was no longer live when looked up.
async fn insert_once(
    conn: &mut PgConnection,
    sql: &Sql,
    letters: &[NewDeadLetter],
    size: usize,
    wake: bool,
) -> Result<Vec<Option<Parked>>, sqlx::Error> {
    let (ids, keys, types) = match run_park(conn, sql, letters, size, wake).await {
        Ok(inserted) => inserted,
        Err(error) => {
            // The schema may have been dropped and migrated again: its types have new OIDs,
            // and this connection's prepared park statement still names the old ones (the
            // server fails it with "cache lookup failed for type" until it is prepared again).
            sql.park_row.forget();
            if matches!(error, sqlx::Error::Database(_)) {
                let _ = conn.clear_cached_statements().await;
            }
            return Err(error);
        }
    };
    let (mut parked, by_key) = match_ids(letters, ids, keys, types)?;
    resolve_duplicates(conn, sql, letters, &mut parked, by_key).await?;
    Ok(parked)
}

/// Inserts one caller's letters (a `park_many`) that take more than `max_bytes` as several
/// park statements of about `max_bytes` each, in one transaction: all of them are stored or
/// none. Over TLS the limit keeps each statement within one TLS record, which sqlx 0.9.0
/// would otherwise send as several and wait for the server's delayed ACK between them (see
/// [`TLS_MAX_BATCH_BYTES`]). A dedupe key repeated across pieces is found by the later piece's
/// lookup, inside the same transaction. Every piece that parks a pending row asks for the
/// `NOTIFY` (those of one transaction are sent once, at its commit): the debounced trailing
/// one could go out before a long transaction commits, and wake retriers to nothing.
async fn insert_in_pieces(
    conn: &mut PgConnection,
    sql: &Sql,
    letters: &[NewDeadLetter],
    max_bytes: usize,
) -> Result<Vec<Parked>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let mut parked = Vec::with_capacity(letters.len());
    let (mut start, mut size) = (0, 0);
    for (i, letter) in letters.iter().enumerate() {
        let len = encoded_len(letter, letter.payload.len());
        if i > start && size + len > max_bytes {
            parked.extend(insert(&mut tx, sql, &letters[start..i], size, true).await?);
            (start, size) = (i, 0);
        }
        size += len;
    }
    parked.extend(insert(&mut tx, sql, &letters[start..], size, true).await?);
    tx.commit().await?;
    Ok(parked)
}

/// A dedupe key is unique per event type: the pair identifies an event for its handler.
type Identity = (String, String);

/// The identity of a keyed letter.
fn identity(letter: &NewDeadLetter) -> Option<Identity> {
    letter.dedupe_key.as_ref().map(|key| (letter.event_type.clone(), key.clone()))
}

/// Each letter's id (`None`: skipped for its dedupe key), and the inserted rows' ids by
/// identity (event type and dedupe key).
type Matched = (Vec<Option<Parked>>, HashMap<Identity, i64>);

/// Gives each letter its inserted row's id: a keyed letter the id stored with its event type
/// and key, a keyless letter the next of the keyless ids in ascending order (park.sql draws
/// them in input order). A letter skipped for its key gets `None`, for [`resolve_duplicates`].
/// Also returns the inserted rows' ids by identity.
fn match_ids(
    letters: &[NewDeadLetter],
    ids: Vec<i64>,
    keys: Vec<Option<String>>,
    types: Vec<Option<String>>,
) -> Result<Matched, sqlx::Error> {
    if ids.len() != keys.len() || ids.len() != types.len() {
        return Err(sqlx::Error::Protocol("park returned ids, keys and types of different lengths".into()));
    }
    let mut keyless = Vec::with_capacity(ids.len());
    let mut by_key = HashMap::new();
    for ((id, key), event_type) in ids.into_iter().zip(keys).zip(types) {
        match (key, event_type) {
            (Some(key), Some(event_type)) => {
                by_key.insert((event_type, key), id);
            }
            (None, _) => keyless.push(id),
            (Some(_), None) => return Err(sqlx::Error::Protocol("park returned a keyed row without its type".into())),
        }
    }
    if keyless.len() != letters.iter().filter(|l| l.dedupe_key.is_none()).count() {
        return Err(sqlx::Error::Protocol("park returned a different number of rows than it was sent".into()));
    }
    keyless.sort_unstable();
    let mut keyless = keyless.into_iter();
    let fresh = |id| Parked { id, deduplicated: false, truncated: false };
    // An identity repeated in the batch: its first letter took the row, the later ones are
    // duplicates.
    let mut taken = std::collections::HashSet::new();
    let parked = letters
        .iter()
        .map(|letter| match identity(letter) {
            None => keyless.next().map(fresh),
            Some(key) => by_key.get(&key).copied().filter(|_| taken.insert(key)).map(fresh),
        })
        .collect();
    Ok((parked, by_key))
}

/// Runs the park statement for `letters`, sent as one `dlq_park_versioned[]`; returns the
/// inserted rows' ids, dedupe keys and (for keyed rows) event types.
async fn run_park(
    conn: &mut PgConnection,
    sql: &Sql,
    letters: &[NewDeadLetter],
    size: usize,
    wake: bool,
) -> Result<(Vec<i64>, Vec<Option<String>>, Vec<Option<String>>), sqlx::Error> {
    let oids = sql.park_row.resolve(conn).await?;
    let rows = ParkRows { letters, oids };
    let mut args = PgArguments::default();
    // Sized once: grown value by value, the buffer is copied over and over.
    args.reserve(4, 64 + size);
    args.add(rows).map_err(sqlx::Error::Encode)?;
    args.add(sql.channel.as_str()).map_err(sqlx::Error::Encode)?;
    args.add(wake).map_err(sqlx::Error::Encode)?;
    // One subject hash per letter, or NULL when none has one (the common case).
    let subjects: Option<Vec<Option<&str>>> = letters
        .iter()
        .any(|l| l.subject.is_some())
        .then(|| letters.iter().map(|l| l.subject.as_ref().map(SubjectHash::as_str)).collect());
    args.add(subjects).map_err(sqlx::Error::Encode)?;
    let row = sqlx::query_with(sql.park.sql(), args).fetch_one(conn).await?;
    Ok((row.try_get(0)?, row.try_get(1)?, row.try_get(2)?))
}

/// Fills in ids of letters skipped for their dedupe key: a row of the same batch, or a live
/// one stored before (looked up in a second statement, which also sees rows committed by
/// others while the insert waited on their key). A letter whose row is no longer live stays
/// `None`.
async fn resolve_duplicates(
    conn: &mut PgConnection,
    sql: &Sql,
    letters: &[NewDeadLetter],
    parked: &mut [Option<Parked>],
    mut by_key: HashMap<Identity, i64>,
) -> Result<(), sqlx::Error> {
    let (mut types, mut keys) = (Vec::new(), Vec::new());
    for (_, letter) in parked.iter().zip(letters).filter(|(p, _)| p.is_none()) {
        if let Some(key) = identity(letter).filter(|k| !by_key.contains_key(k)) {
            types.push(key.0);
            keys.push(key.1);
        }
    }
    if !keys.is_empty() {
        let rows = sqlx::query(sql.dedupe_lookup.sql()).bind(&types).bind(&keys).fetch_all(&mut *conn).await?;
        for row in rows {
            by_key.insert((row.try_get("event_type")?, row.try_get("dedupe_key")?), row.try_get("id")?);
        }
    }
    for (slot, letter) in parked.iter_mut().zip(letters) {
        if slot.is_none() {
            let stored = identity(letter).and_then(|k| by_key.get(&k).copied());
            *slot = stored.map(|id| Parked { id, deduplicated: true, truncated: false });
        }
    }
    Ok(())
}

struct Job {
    letters: Vec<NewDeadLetter>,
    /// About how many bytes the letters take in a park statement.
    bytes: usize,
    reply: oneshot::Sender<Delivery>,
}

/// A job's answer: its letters' ids in order, or the batch's error.
type Reply = Result<Vec<Parked>, SharedError>;

/// Answers to send: a batch's in job order, or the rest of a relay with the next one last.
type Chain = Vec<(oneshot::Sender<Delivery>, Reply)>;

/// A job's answer, and the answers its caller passes on.
struct Delivery {
    reply: Reply,
    rest: Chain,
}

/// Jobs answered one from the other after the writer answers the first.
const RELAY_CHAIN: usize = 16;

/// Answers a batch's jobs in relays of [`RELAY_CHAIN`]: the writer wakes the first caller of
/// each, and each caller, once woken, wakes the next before it goes on. Woken one after another
/// by the writer, 64 callers had the runtime wake an idle worker thread for nearly every one
/// (the retrier bench's park scenario, one run of each side: 31,000–33,000 context switches of
/// the bench process against 11,000 this way); a wake from the task that has just run goes to
/// its own worker's next slot. A relay is short so that no caller waits on many others being
/// scheduled first.
fn deliver(answers: Chain) {
    let mut answers = answers.into_iter();
    loop {
        let mut chain: Chain = answers.by_ref().take(RELAY_CHAIN).collect();
        if chain.is_empty() {
            return;
        }
        chain.reverse();
        relay(chain);
    }
}

/// Sends the next answer of a chain, with the rest of it; passes over callers that stopped
/// waiting.
fn relay(mut chain: Chain) {
    while let Some((to, reply)) = chain.pop() {
        match to.send(Delivery { reply, rest: chain }) {
            Ok(()) => return,
            Err(undelivered) => chain = undelivered.rest,
        }
    }
}

/// Where a caller waits for its job's answer. It passes the rest of its chain on when the
/// answer arrives, and also when the caller stops waiting (its park timed out, its future was
/// dropped) after the answer was sent but before it was read.
struct Answer(oneshot::Receiver<Delivery>);

impl Answer {
    async fn recv(&mut self) -> Result<Reply, oneshot::error::RecvError> {
        let Delivery { reply, rest } = (&mut self.0).await?;
        relay(rest);
        Ok(reply)
    }
}

impl Drop for Answer {
    fn drop(&mut self) {
        // Closed first, so no answer can arrive after the check and be dropped unseen.
        self.0.close();
        if let Ok(Delivery { rest, .. }) = self.0.try_recv() {
            relay(rest);
        }
    }
}

/// The handle of the group-commit writer task.
pub(crate) struct GroupCommit {
    tx: mpsc::Sender<Job>,
}

impl GroupCommit {
    /// Starts the writer; it stops when the last handle is dropped.
    pub(crate) fn start(
        kept_connections: Arc<KeptConnections>,
        sql: Arc<Sql>,
        config: &PgConfig,
        debounce: Arc<Debounce>,
    ) -> Self {
        let (tx, rx) = mpsc::channel(1024);
        let writer = Arc::new(Writer {
            sql,
            linger: config.linger,
            max_batch: config.max_batch.max(1),
            max_bytes: config.max_batch_bytes.map_or_else(std::sync::OnceLock::new, std::sync::OnceLock::from),
            timeout: config.park_timeout,
            debounce,
            kept_connections,
        });
        let queue = Arc::new(tokio::sync::Mutex::new(Queue { rx, held: None }));
        for _ in 0..config.writers.max(1) {
            tokio::spawn(Arc::clone(&writer).run(Arc::clone(&queue)));
        }
        Self { tx }
    }

    /// Queues letters and waits for their ids (or the batch's error).
    pub(crate) async fn submit(&self, letters: Vec<NewDeadLetter>, bytes: usize) -> StoreResult<Vec<Parked>> {
        let (reply, answer) = oneshot::channel();
        let mut answer = Answer(answer);
        self.tx.send(Job { letters, bytes, reply }).await.map_err(|_| dlq_core::Error::store(WriterGone))?;
        match answer.recv().await {
            Ok(reply) => reply.map_err(dlq_core::Error::store),
            Err(_) => Err(dlq_core::Error::store(WriterGone)),
        }
    }
}

/// How many times the writer yields, when nothing is queued, before it writes what it has:
/// enough for parkers woken by the previous batch's answers to queue their next letters.
const MAX_YIELDS: u32 = 4;

/// The writers' queue of parks.
struct Queue {
    rx: mpsc::Receiver<Job>,
    /// A job taken from `rx` that did not fit the batch collected then: the next one's first.
    held: Option<Job>,
}

struct Writer {
    sql: Arc<Sql>,
    linger: Duration,
    max_batch: usize,
    /// `PgConfig::max_batch_bytes`, or the choice made on the first connection (unset
    /// until then: [`PLAIN_MAX_BATCH_BYTES`]).
    max_bytes: std::sync::OnceLock<usize>,
    timeout: Duration,
    debounce: Arc<Debounce>,
    /// The connection between two batches of a burst.
    kept_connections: Arc<KeptConnections>,
}

impl Writer {
    /// One writer: takes a batch while holding the queue, writes it without, so that
    /// several writers overlap one batch's commit with the next one's collection.
    async fn run(self: Arc<Self>, queue: Arc<tokio::sync::Mutex<Queue>>) {
        loop {
            let jobs = {
                let mut queue = queue.lock().await;
                let first = match queue.held.take() {
                    Some(job) => job,
                    None => match queue.rx.recv().await {
                        Some(job) => job,
                        None => return,
                    },
                };
                self.collect(first, &mut queue).await
            };
            self.write(jobs).await;
        }
    }

    /// Takes the jobs already queued, yielding to let parkers that are about to send (those
    /// just answered) do so, then lingers for more: up to `max_batch` rows and `max_bytes`
    /// (a job that would pass it waits for the next batch; one job alone may pass either).
    async fn collect(&self, first: Job, queue: &mut Queue) -> Vec<Job> {
        let mut rows = first.letters.len();
        let mut bytes = first.bytes;
        let mut jobs = vec![first];
        let deadline = Instant::now() + self.linger;
        let mut yields = 0;
        let rx = &mut queue.rx;
        let max_bytes = self.max_bytes.get().copied().unwrap_or(PLAIN_MAX_BATCH_BYTES);
        while rows < self.max_batch && bytes < max_bytes {
            let next = match rx.try_recv() {
                Ok(job) => Some(job),
                Err(mpsc::error::TryRecvError::Empty) if yields < MAX_YIELDS => {
                    yields += 1;
                    tokio::task::yield_now().await;
                    continue;
                }
                Err(mpsc::error::TryRecvError::Empty) if !self.linger.is_zero() => {
                    tokio::time::timeout_at(deadline, rx.recv()).await.ok().flatten()
                }
                Err(_) => None,
            };
            let Some(job) = next else { break };
            if bytes + job.bytes > max_bytes {
                queue.held = Some(job);
                break;
            }
            rows += job.letters.len();
            bytes += job.bytes;
            jobs.push(job);
        }
        jobs
    }

    /// Writes the letters of every job still awaited in one insert and answers each job.
    async fn write(&self, jobs: Vec<Job>) {
        let jobs: Vec<Job> = jobs.into_iter().filter(|j| !j.reply.is_closed()).collect();
        if jobs.is_empty() {
            return;
        }
        let mut sizes = Vec::with_capacity(jobs.len());
        let mut replies = Vec::with_capacity(jobs.len());
        let mut letters = Vec::with_capacity(jobs.iter().map(|j| j.letters.len()).sum());
        let mut bytes = 0;
        for job in jobs {
            sizes.push(job.letters.len());
            replies.push(job.reply);
            letters.extend(job.letters);
            bytes += job.bytes;
        }
        let result = match tokio::time::timeout(self.timeout, self.insert(letters, bytes)).await {
            Ok(result) => result.map_err(|e| SharedError(Arc::new(e))),
            Err(_) => Err(SharedError(Arc::new(sqlx::Error::PoolTimedOut))),
        };
        let answers: Chain = match result {
            Ok(parked) => {
                let mut rest = parked.into_iter();
                replies
                    .into_iter()
                    .zip(sizes)
                    .map(|(reply, size)| (reply, Ok(rest.by_ref().take(size).collect())))
                    .collect()
            }
            Err(error) => replies.into_iter().map(|reply| (reply, Err(error.clone()))).collect(),
        };
        deliver(answers);
    }

    async fn insert(&self, letters: Vec<NewDeadLetter>, bytes: usize) -> Result<Vec<Parked>, sqlx::Error> {
        let mut taken = self.kept_connections.take().await?;
        if self.max_bytes.get().is_none() {
            self.choose_max_bytes(&mut taken.conn).await;
        }
        let max_bytes = self.max_bytes.get().copied().unwrap_or(PLAIN_MAX_BATCH_BYTES);
        if bytes > max_bytes && letters.len() > 1 {
            // A transaction of several statements, in a task of its own: the park timeout drops
            // this future, and dropped between `BEGIN` and its answer, sqlx 0.9.0 would hand
            // the connection back to the pool still inside the transaction (its rollback guard
            // counts the transaction only once the answer came). A call that timed out may
            // still be stored, as `PgConfig::park_timeout` says.
            let (sql, kept) = (Arc::clone(&self.sql), Arc::clone(&self.kept_connections));
            let pieces = tokio::spawn(async move {
                let parked = insert_in_pieces(&mut taken.conn, &sql, &letters, max_bytes).await?;
                kept.keep(taken);
                Ok(parked)
            });
            return pieces.await.map_err(|e| sqlx::Error::Protocol(format!("the park task ended: {e}")))?;
        }
        let wake = letters.iter().any(|l| l.status() == Status::Pending) && self.debounce.notify_now();
        let parked = insert(&mut taken.conn, &self.sql, &letters, bytes, wake).await?;
        self.kept_connections.keep(taken);
        Ok(parked)
    }

    /// Sets the batch byte limit from whether `conn` is encrypted (`PgConfig::max_batch_bytes`
    /// left to the store). A server that refuses the question (no `pg_stat_ssl`) gets the
    /// plain limit, once; a connection error leaves it unset, to be asked on the next batch.
    async fn choose_max_bytes(&self, conn: &mut PgConnection) {
        let tls = sqlx::query_scalar::<_, bool>("SELECT ssl FROM pg_catalog.pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_optional(conn)
            .await;
        let tls = match tls {
            Ok(tls) => tls == Some(true),
            Err(error @ sqlx::Error::Database(_)) => {
                tracing::debug!(%error, "could not tell whether the connection is encrypted; taken as not");
                false
            }
            Err(error) => return tracing::debug!(%error, "could not tell whether the connection is encrypted"),
        };
        let max = if tls { TLS_MAX_BATCH_BYTES } else { PLAIN_MAX_BATCH_BYTES };
        tracing::debug!(tls, max_batch_bytes = max, "park batches sized");
        let _ = self.max_bytes.set(max);
    }
}

/// The batch byte limit over a plain connection, or one with `TCP_NODELAY` (the pool of
/// `PgStore::connect_with`): far below PostgreSQL's 1 GiB message limit.
pub(crate) const PLAIN_MAX_BATCH_BYTES: usize = 16 << 20;

/// The batch byte limit over TLS on a pool the store did not build: a statement in one TLS
/// record (16 KiB, with room for the statement's other arguments and the estimate's error),
/// so that it does not wait for a delayed ACK (sqlx 0.9.0 sets no `TCP_NODELAY`).
const TLS_MAX_BATCH_BYTES: usize = 16_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_normalization() {
        let nul = Payload::Json(serde_json::json!({"a": "x\u{0}y"}));
        assert!(matches!(jsonb_storable(nul), Payload::Raw { truncated: None, .. }));
        let failure =
            dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Transient, "io", "x".into(), vec![], None);
        let big = Payload::Json(serde_json::json!({"a": "x".repeat(100)}));
        let (letter, len) = prepare_one(NewDeadLetter::new("t", big, failure.clone()), 10);
        assert_eq!(len, 10);
        let Payload::Raw { bytes, truncated: Some(t) } = letter.payload else { panic!() };
        assert_eq!(bytes.len(), 10);
        assert_eq!(t.original_len, 108); // {"a":"…"}
        assert_eq!(letter.dead_reason, Some(dlq_core::adapter::DeadReason::TooLarge));
        let small = Payload::Json(serde_json::json!([1, 2]));
        let (letter, _) = prepare_one(NewDeadLetter::new("t", small.clone(), failure), 5);
        assert_eq!((letter.payload, letter.dead_reason), (small, None));
    }

    /// The statement's answer order is not relied on: keyless ids are matched in ascending
    /// order, keyed ones by key; a repeated key's later letters and a stored key's are left
    /// for the lookup; a count that does not add up is an error, not a wrong id.
    #[test]
    fn inserted_ids_are_matched_to_letters() {
        let failure =
            dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Transient, "io", "x".into(), vec![], None);
        let letter = |key: Option<&str>| {
            let l = NewDeadLetter::new("t", Payload::Json(serde_json::json!(1)), failure.clone());
            match key {
                Some(k) => l.with_dedupe_key(k),
                None => l,
            }
        };
        let letters =
            [letter(None), letter(Some("a")), letter(None), letter(Some("a")), letter(Some("old")), letter(None)];
        let ids = vec![14, 11, 12, 10];
        let keys = vec![None, Some("a".to_owned()), None, None];
        let types = vec![None, Some("t".to_owned()), None, None];
        let (parked, by_key) = match_ids(&letters, ids, keys, types).unwrap();
        let ids: Vec<Option<i64>> = parked.iter().map(|p| p.map(|p| p.id)).collect();
        assert_eq!(ids, [Some(10), Some(11), Some(12), None, None, Some(14)]);
        assert_eq!(by_key, HashMap::from([(("t".to_owned(), "a".to_owned()), 11)]));
        assert!(match_ids(&letters, vec![1, 2], vec![None, None], vec![None, None]).is_err(), "a keyless row missing");
        assert!(match_ids(&letters, vec![1, 2], vec![None], vec![None]).is_err(), "lengths differ");
    }

    /// One key under two event types is two identities: each letter gets its own row.
    #[test]
    fn a_key_shared_by_two_event_types_matches_each_its_own_row() {
        let failure =
            dlq_core::classify::FailureInfo::new(dlq_core::ErrorClass::Transient, "io", "x".into(), vec![], None);
        let letter = |event_type: &str| {
            NewDeadLetter::new(event_type, Payload::Json(serde_json::json!(1)), failure.clone())
                .with_dedupe_key("payments/3/42")
        };
        let letters = [letter("payment"), letter("receipt"), letter("payment")];
        let key = Some("payments/3/42".to_owned());
        let types = vec![Some("receipt".to_owned()), Some("payment".to_owned())];
        let (parked, _) = match_ids(&letters, vec![8, 7], vec![key.clone(), key], types).unwrap();
        let ids: Vec<Option<i64>> = parked.iter().map(|p| p.map(|p| p.id)).collect();
        assert_eq!(ids, [Some(7), Some(8), None], "the repeat of `payment` is left for the lookup");
    }

    fn answers(n: i64) -> (Chain, Vec<Answer>) {
        (0..n)
            .map(|id| {
                let (tx, rx) = oneshot::channel();
                ((tx, Ok(vec![Parked { id, deduplicated: false, truncated: false }])), Answer(rx))
            })
            .unzip()
    }

    fn id(reply: Reply) -> i64 {
        reply.expect("an answer")[0].id
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_waiting_caller_is_answered_past_those_that_left() {
        let (sent, waiting) = answers(40);
        // Callers 3 and 20 (in two of the three relays) stopped waiting before the batch ended;
        // each other caller waits in a task of its own, as parkers do.
        let left = [3, 20];
        let callers: Vec<_> = waiting
            .into_iter()
            .enumerate()
            .filter_map(|(i, mut answer)| {
                if left.contains(&i) {
                    return None;
                }
                Some((i, tokio::spawn(async move { answer.recv().await })))
            })
            .collect();
        deliver(sent);
        for (i, caller) in callers {
            let reply = tokio::time::timeout(Duration::from_secs(5), caller).await;
            assert_eq!(id(reply.expect("answered in time").expect("task").expect("sent")), i as i64);
        }
    }

    #[tokio::test]
    async fn a_caller_that_leaves_after_its_answer_came_passes_the_rest_on() {
        let (sent, waiting) = answers(5);
        deliver(sent);
        let mut waiting = waiting.into_iter();
        // The first caller's answer has arrived; it stops waiting without reading it.
        drop(waiting.next());
        for (i, mut answer) in waiting.enumerate() {
            let reply = tokio::time::timeout(Duration::from_secs(5), answer.recv()).await;
            assert_eq!(id(reply.expect("answered in time").expect("sent")), i as i64 + 1);
        }
    }

    #[tokio::test]
    async fn a_failed_batch_reaches_every_caller() {
        let (sent, waiting) = answers(20);
        let error = SharedError(Arc::new(sqlx::Error::PoolTimedOut));
        deliver(sent.into_iter().map(|(to, _)| (to, Err(error.clone()))).collect());
        for mut answer in waiting {
            let reply = answer.recv().await.expect("sent");
            assert!(matches!(reply, Err(e) if matches!(*e.0, sqlx::Error::PoolTimedOut)));
        }
    }

    #[test]
    fn nul_is_cleaned() {
        let mut s = "a\0b".to_owned();
        clean(&mut s);
        assert_eq!(s, "a\u{FFFD}b");
    }
}
