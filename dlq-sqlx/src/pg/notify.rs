//! Wake-ups: a `LISTEN` on the store's channel, started on the first wait.
//!
//! One background task owns a `PgListener` on a dedicated one-connection pool (so the
//! store's pool keeps all its connections) and announces each notification on a
//! [`WorkSignal`], which wakes every waiter and every later wait on an older ticket. A lost
//! connection is re-established with backoff; waiters are woken then too, since
//! notifications sent meanwhile were lost.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use dlq_core::store::{WorkSignal, WorkTicket};
use sqlx::PgPool;
use sqlx::postgres::{PgListener, PgPoolOptions};
use tokio::sync::watch;
use tokio::time::Instant;

/// At most one `NOTIFY` per window from a store's parks and retries (plus a trailing one):
/// a burst of writes wakes retriers once rather than on every batch, at most this late.
const NOTIFY_WINDOW: Duration = Duration::from_millis(20);

/// Rate-limits the store's own `NOTIFY`s. A write asks [`Debounce::notify_now`]: yes once per
/// window; otherwise the write stays silent and a trailing `NOTIFY` is sent when the window
/// ends, so a waiting retrier is never left waiting for its poll interval.
pub(crate) struct Debounce {
    state: Mutex<DebounceState>,
    pool: PgPool,
    channel: String,
}

struct DebounceState {
    last: Option<Instant>,
    trailing: bool,
}

impl Debounce {
    pub(crate) fn new(pool: PgPool, channel: String) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(DebounceState { last: None, trailing: false }), pool, channel })
    }

    /// Whether the write about to happen should `NOTIFY` itself.
    pub(crate) fn notify_now(self: &Arc<Self>) -> bool {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = Instant::now();
        match state.last {
            Some(last) if now < last + NOTIFY_WINDOW => {
                if !state.trailing {
                    state.trailing = true;
                    tokio::spawn(Arc::clone(self).trail(last + NOTIFY_WINDOW));
                }
                false
            }
            _ => {
                state.last = Some(now);
                true
            }
        }
    }

    async fn trail(self: Arc<Self>, at: Instant) {
        tokio::time::sleep_until(at).await;
        {
            let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            state.trailing = false;
            state.last = Some(Instant::now());
        }
        let sent = sqlx::query("SELECT pg_notify($1, '')").bind(&self.channel).execute(&self.pool).await;
        if let Err(error) = sent {
            tracing::debug!(%error, "trailing dead-letter wake-up not sent");
        }
    }
}

pub(crate) struct Wakeups {
    notify: WorkSignal,
    started: OnceLock<()>,
    pool: PgPool,
    channel: String,
    /// Dropped with the store, which stops the listener task.
    stop: watch::Sender<()>,
}

impl Wakeups {
    /// `options`: a connection that keeps its session (the `LISTEN` lasts as long as it).
    pub(crate) fn new(options: sqlx::postgres::PgConnectOptions, channel: String) -> Self {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .acquire_timeout(Duration::from_secs(5));
        let pool = super::nodelay::with_tcp_nodelay(pool, &options).connect_lazy_with(options);
        let (stop, _) = watch::channel(());
        Self { notify: WorkSignal::new(), started: OnceLock::new(), pool, channel, stop }
    }

    /// Where the notifications stand: taken before a claim.
    pub(crate) fn ticket(&self) -> WorkTicket {
        self.notify.ticket()
    }

    /// Waits for a notification received since `after` was taken (returning at once if one
    /// was) or `max`, starting the listener on first use.
    pub(crate) async fn wait(&self, after: WorkTicket, max: Duration) {
        self.started.get_or_init(|| {
            let task = listen(self.pool.clone(), self.channel.clone(), self.notify.clone(), self.stop.subscribe());
            tokio::spawn(task);
        });
        self.notify.wait(after, max).await;
    }
}

async fn listen(pool: PgPool, channel: String, notify: WorkSignal, mut stop: watch::Receiver<()>) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let connected = async {
            // Its TLS handshake without delayed ACKs: a worker waiting for a wake-up meanwhile
            // waits for this connection (the listener announces once it listens).
            let watch = super::nodelay::watch_tcp_nodelay(&pool.connect_options());
            let listener = PgListener::connect_with(&pool).await;
            drop(watch);
            let mut listener = listener?;
            listener.listen(&channel).await?;
            Ok::<_, sqlx::Error>(listener)
        };
        let listener = tokio::select! {
            listener = connected => listener,
            _ = stop.changed() => return,
        };
        match listener {
            Ok(listener) => {
                backoff = Duration::from_millis(100);
                // Anything parked before the LISTEN took effect is due now.
                notify.announce();
                if !relay(listener, &notify, &mut stop).await {
                    return;
                }
            }
            Err(error) => tracing::warn!(%error, channel, "cannot listen for dead-letter wake-ups; retrying"),
        }
        notify.announce();
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return,
        }
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

/// Forwards notifications until the listener fails (`true`: reconnect) or the store is
/// dropped (`false`).
async fn relay(mut listener: PgListener, notify: &WorkSignal, stop: &mut watch::Receiver<()>) -> bool {
    loop {
        tokio::select! {
            received = listener.try_recv() => match received {
                // `None`: the connection was lost and re-established; notifications may be lost.
                Ok(_) => notify.announce(),
                Err(sqlx::Error::PoolClosed) => return false,
                Err(error) => {
                    tracing::warn!(%error, "dead-letter listener failed; reconnecting");
                    return true;
                }
            },
            _ = stop.changed() => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a paused clock: a burst notifies once, then once more when its window ends, and a
    /// write after the window notifies at once. No database: the trailing `NOTIFY` fails to
    /// connect, which is logged and changes nothing here.
    #[tokio::test(start_paused = true)]
    async fn a_burst_notifies_once_per_window_and_once_after_it() {
        let pool = PgPoolOptions::new().connect_lazy("postgres://postgres@127.0.0.1:1/none").unwrap();
        let debounce = Debounce::new(pool, "dlq".into());
        let trailing = || debounce.state.lock().unwrap().trailing;
        assert!(debounce.notify_now(), "the first write of a burst notifies");
        for _ in 0..59 {
            assert!(!debounce.notify_now(), "the rest of the window stays silent");
        }
        assert!(trailing(), "one trailing notify is due when the window ends");
        tokio::time::sleep(NOTIFY_WINDOW).await;
        tokio::task::yield_now().await;
        assert!(!trailing(), "the trailing notify went out");
        assert!(!debounce.notify_now(), "a write right after it is in its window");
        tokio::time::sleep(NOTIFY_WINDOW * 2).await;
        tokio::task::yield_now().await;
        assert!(debounce.notify_now(), "a write after a quiet window notifies at once");
    }
}
