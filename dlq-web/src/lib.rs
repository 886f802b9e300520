//! `dlq-web`, the operator console: an [`axum::Router`] a service nests under any prefix,
//! with server-rendered HTML pages and a JSON API (`/api/...`) over [`dlq_core::admin`], the
//! same calls the `dlq` command line makes, so both audit the same way.
//!
//! ```no_run
//! use std::sync::Arc;
//! use dlq_core::admin::Admin;
//!
//! # async fn demo() -> std::io::Result<()> {
//! let store = Arc::new(dlq_core::MemoryStore::new());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! let console = dlq_web::router(
//!     Admin::new(store, "console"),
//!     dlq_web::Options::default()
//!         .allow_actions(true)
//!         // Without a token, the console answers only to this address and loopback names.
//!         .bound_to(listener.local_addr()?)
//!         // The service's own auth layer names the operator in the audit log.
//!         .actor(|parts| parts.headers.get("x-user").and_then(|v| v.to_str().ok()).map(str::to_owned)),
//! );
//! let app = axum::Router::new().nest("/dlq", console);
//! axum::serve(listener, app).await
//! # }
//! ```
//!
//! # Pages and routes
//! | route | what |
//! | --- | --- |
//! | `GET /` | overview: counts by status × type, growth, saturation, retriers, orphans, warnings, top groups (refreshes itself) |
//! | `GET /charts/parked.svg?window=24h\|7d` | rows parked per hour (24 h) or per 6 hours (7 days), a line per event type (the 6 largest), server-rendered SVG |
//! | `GET /groups` | failure groups by fingerprint |
//! | `GET /groups/{fingerprint}` | one group: its rows and the group actions (the fingerprint percent-encoded as one path segment; `GET /group?group=` for one no segment can carry: empty, `.`, `..`) |
//! | `GET /events?status=&event_type=&group=&kind=&reason=&since=&until=&after=&order=&limit=` | rows, the CLI's filters in the URL, keyset pagination |
//! | `GET /events/{id}` | one row: payload, truncation, error chain, stack trace, source, attempts, audit |
//! | `POST /redrive`, `POST /discard` | by `id` or `group`: a dry run with counts first; `confirm=1` (with an optional `canary` for a redrive and `rate` in rows/s) stores an operation, runs it in the background and answers at once: a redirect to its page, the id and link in the body (`POST /api/redrive` with `"background": true`: 202 with them); a [`Background`] stops such runs at shutdown, resumable |
//! | `GET /operations/{id}` | a bulk operation: state, rows moved and refused, its cursor; reloads itself while it runs |
//! | `POST /operations/{id}/resume` | continues a stopped operation (a failed canary, a restart) from its cursor, optionally at a `rate` |
//! | `POST /groups/{fingerprint}/patch` | one JSON Patch applied to the group's dead rows: a preview that tries it on every row (which it fits, with their changes; which it does not, with why: `Admin::patch_preview`, as `dlq patch --group --dry-run`), then `confirm=1` (with an optional `rate`) stores it as an operation (`BulkPlan::patch`, as `dlq patch --group` does) run in the background like a confirmed redrive, answering at once with a redirect to its page; `POST /group/patch?group=` likewise |
//! | `POST /events/{id}/edit` | a new payload (`payload`, JSON; or `payload_hex`, a raw payload's exact bytes as hex): validated, the change shown, then `confirm=1`; a payload equal to the stored one is never written |
//! | `POST /events/{id}/reveal` | with [`Options::reveal`] approving the request: the row whole (redacted fields unmasked, a sealed payload opened where the key ring is), after an audit entry `reveal` with the actor and the `reason` (required); `POST /api/events/{id}/reveal` answers its JSON |
//! | `POST /audit/{audit_id}/undo` | restores what a patch replaced (refused when later patches would be reverted with it, unless `force`) |
//! | `GET /api/openapi.json` | the JSON API, documented (a hand-written OpenAPI 3.1 document) |
//!
//! # Security
//! Without [`Options::token`], the console answers only requests whose `Host` names it: the
//! address [`Options::bound_to`] gives, or `localhost`, `127.0.0.1`, `[::1]` with its port (any
//! port when it is not given), or a name [`Options::allow_host`] allows; any other is a 421
//! that says why. A web page the operator visits can make its own name resolve to 127.0.0.1
//! (DNS rebinding) and would otherwise read and act through the operator's browser.
//! Closed by default: read-only unless [`Options::allow_actions`]; every mutating request is a
//! `POST` whose `Origin` (or `Referer`) must name the same host, except JSON requests without
//! one (a browser cannot send those cross-site without a CORS preflight, which the console
//! never grants; `Origin: null`, an opaque origin, is refused like a foreign one); every
//! response, refusals included, carries a `Content-Security-Policy` that allows no script at
//! all, `X-Frame-Options: DENY` and `X-Content-Type-Options: nosniff`, and every refusal a
//! short body that says why; request bodies are limited ([`Options::body_limit`], 413), and so
//! are request heads ([`MAX_URI_BYTES`], 414; [`MAX_HEADERS`], [`MAX_HEADER_BYTES`], 431: see
//! [`harden`] for the server's own limits past them); with [`Options::token`] every request
//! must carry the token (compared in constant time). Every string from the database goes through maud, which
//! escapes it, and every value put in a link is percent-encoded. Its control characters (a
//! terminal's escapes, C1) and bidi overrides show as escapes (`\u001b`, `\u202e`), never as
//! they are; in tables and the charts' legend a long value is cut with `…`, and shown whole on
//! the row's page. The JSON API answers every refusal as `{"error": "..."}`.
//!
//! A health probe beside the console (`dlq serve`'s `/healthz`) needs no token, and answers
//! a `Host` that is an IP address (load balancers and kubelets probe by address) or a name the
//! console answers to without a token; any other name is a 421 ([`Options::accepts_probe`]).
//!
//! # Logs
//! Through `tracing` (target `dlq_web`): each action (redrive, discard, patch, edit, undo,
//! resume) at `info` with its verb, what it acted on (rows, a group, an operation), the
//! operator and the reason, each background operation's outcome, and each answer of 5xx at
//! `error` with the operator and why; every string in them cut to 200 characters, control
//! characters and bidi overrides shown as `.`.

mod api;
mod chart;
mod erase;
mod error;
mod extract;
mod filter;
mod listener;
mod log;
mod openapi;
mod operations;
mod pages;
mod reply;
mod security;
mod snapshot;
mod view;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::request::Parts;
use axum::routing::{get, post};
use dlq_core::admin::Admin;
pub use listener::{Hardened, HardenedListener};
pub use operations::Background;
pub use security::{MAX_HEADER_BYTES, MAX_HEADERS, MAX_URI_BYTES};

/// Names the operator of a request, for the audit log: the embedding service's auth layer
/// (a header it sets, an extension it inserts) tells who is acting. `None` keeps the
/// [`Admin`]'s own actor.
pub type ActorFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Says whether the operator of a request may see rows whole: their redacted fields
/// (`#[dead_letter(redact = [...])]`) and, where the console's [`Admin`] holds the key ring,
/// their sealed payloads ([`Options::reveal`]).
pub type RevealFn = Arc<dyn Fn(&Parts) -> bool + Send + Sync>;

/// What the console allows and how it names operators.
///
/// ```
/// let options = dlq_web::Options::default().allow_actions(true).token("s3cret").body_limit(64 * 1024);
/// assert!(options.actions_allowed());
/// ```
#[derive(Clone)]
pub struct Options {
    actions: bool,
    token: Option<String>,
    actor: Option<ActorFn>,
    reveal: Option<RevealFn>,
    body_limit: usize,
    refresh_seconds: u32,
    snapshot_max_age: std::time::Duration,
    bound: Option<SocketAddr>,
    hosts: Vec<String>,
    background: Background,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            actions: false,
            token: None,
            actor: None,
            reveal: None,
            body_limit: DEFAULT_BODY_LIMIT,
            refresh_seconds: 30,
            snapshot_max_age: DEFAULT_SNAPSHOT_MAX_AGE,
            bound: None,
            hosts: Vec::new(),
            background: Background::new(),
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("actions", &self.actions)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("actor", &self.actor.as_ref().map(|_| "<hook>"))
            .field("reveal", &self.reveal.as_ref().map(|_| "<hook>"))
            .field("body_limit", &self.body_limit)
            .field("refresh_seconds", &self.refresh_seconds)
            .field("snapshot_max_age", &self.snapshot_max_age)
            .field("bound", &self.bound)
            .field("hosts", &self.hosts)
            .field("background", &self.background)
            .finish()
    }
}

/// The default limit of a request body: 1 MiB (a payload edit is the largest body).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// How old the overview's figures and a failure-group list may be before a page view
/// refreshes them in the background: 10 s.
///
/// ```
/// assert_eq!(dlq_web::DEFAULT_SNAPSHOT_MAX_AGE, std::time::Duration::from_secs(10));
/// ```
pub const DEFAULT_SNAPSHOT_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(10);

impl Options {
    /// Enables the actions (redrive, discard, patch, edit, undo); without it every `POST`
    /// answers 403 and the pages show no action.
    #[must_use]
    pub const fn allow_actions(mut self, allow: bool) -> Self {
        self.actions = allow;
        self
    }

    /// Requires `token` on every request: `Authorization: Bearer TOKEN`, or the `dlq_token`
    /// cookie that opening any page with `?token=TOKEN` sets. Compared in constant time.
    #[must_use]
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into()).filter(|t| !t.is_empty());
        self
    }

    /// Names the operator of each request for the audit log (see [`ActorFn`]).
    ///
    /// ```
    /// let options = dlq_web::Options::default()
    ///     .actor(|parts| parts.headers.get("x-forwarded-user")?.to_str().ok().map(str::to_owned));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn actor(mut self, hook: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static) -> Self {
        self.actor = Some(Arc::new(hook));
        self
    }

    /// Lets the operators `hook` approves reveal a row: its page then offers a form (a
    /// reason, required) that `POST`s to `/events/{id}/reveal` and shows the row whole, its
    /// redacted fields unmasked and, when the console's [`Admin`] holds the key ring, its
    /// sealed payload and error opened (`POST /api/events/{id}/reveal` answers the row's
    /// JSON likewise). Each reveal writes an audit entry (action `reveal`, the actor, the
    /// reason) before anything is shown. Without a hook, or for a request it refuses (403),
    /// every row stays masked. A reveal is a `POST` under the console's rules (same origin,
    /// the token), allowed in a read-only console too: it changes no row.
    ///
    /// ```
    /// let options = dlq_web::Options::default()
    ///     .actor(|parts| parts.headers.get("x-user")?.to_str().ok().map(str::to_owned))
    ///     .reveal(|parts| parts.headers.get("x-roles").and_then(|v| v.to_str().ok()).is_some_and(|r| r.split(',').any(|r| r == "dlq-reveal")));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub fn reveal(mut self, hook: impl Fn(&Parts) -> bool + Send + Sync + 'static) -> Self {
        self.reveal = Some(Arc::new(hook));
        self
    }

    /// The largest request body accepted, in bytes (413 past it); default [`DEFAULT_BODY_LIMIT`].
    #[must_use]
    pub const fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = bytes;
        self
    }

    /// How often the overview reloads itself, in seconds (0: never); default 30.
    #[must_use]
    pub const fn refresh_seconds(mut self, seconds: u32) -> Self {
        self.refresh_seconds = seconds;
        self
    }

    /// How old the store-wide figures of the overview and the failure-group lists may be
    /// before a page view refreshes them (in the background: the page shows the previous
    /// figures, with their time); default [`DEFAULT_SNAPSHOT_MAX_AGE`]. PostgreSQL answers
    /// them from counts its triggers keep (a few milliseconds at any size); SQLite and other
    /// stores aggregate over the whole table, which a snapshot spares most views. Row lists,
    /// details and one group's page are always read fresh, and every action of the console
    /// drops the snapshots. A snapshot older than three times this is not shown (the console
    /// sat unviewed): that view waits for fresh figures.
    /// `Duration::ZERO` computes them on every view.
    ///
    /// ```
    /// let options = dlq_web::Options::default().snapshot_max_age(std::time::Duration::from_secs(30));
    /// # let _ = options;
    /// ```
    #[must_use]
    pub const fn snapshot_max_age(mut self, max_age: std::time::Duration) -> Self {
        self.snapshot_max_age = max_age;
        self
    }

    /// The address the console's listener is bound to (`TcpListener::local_addr`), so that
    /// it can tell its own `Host` from a foreign one. Without a [token](Options::token) the
    /// console answers only requests whose `Host` names it: this address, or a loopback name
    /// (`localhost`, `127.0.0.1`, `[::1]`) with this port; any other `Host` is a 421. A web
    /// page the operator visits can make its own name resolve to 127.0.0.1 (DNS rebinding),
    /// and then the browser would send that page's requests, with the page's name in `Host`,
    /// to the console. Unset, loopback names with any port pass (and still no other name).
    /// `dlq serve` sets it; a service that mounts the router on its own listener should too.
    ///
    /// ```
    /// # async fn demo() -> std::io::Result<()> {
    /// let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    /// let options = dlq_web::Options::default().bound_to(listener.local_addr()?);
    /// assert!(options.accepts_host(Some("localhost:8080")));
    /// assert!(options.accepts_host(Some("[::1]:8080")));
    /// assert!(!options.accepts_host(Some("localhost:9090")));
    /// assert!(!options.accepts_host(Some("attacker.example:8080")));
    /// # Ok(())
    /// # }
    /// ```
    #[must_use]
    pub const fn bound_to(mut self, addr: SocketAddr) -> Self {
        self.bound = Some(addr);
        self
    }

    /// Another name the console answers to without a token: `dlq.internal.example` (any
    /// port) or `dlq.internal.example:8443` (that port only). For a console reached through a
    /// reverse proxy or a name of its own, whose users the service's own auth layer checks;
    /// may be given more than once. With a [token](Options::token) every `Host` passes (a
    /// rebinding page cannot present the token), so this is not needed.
    ///
    /// ```
    /// let options = dlq_web::Options::default().allow_host("dlq.internal.example");
    /// assert!(options.accepts_host(Some("DLQ.internal.example:443")));
    /// assert!(!options.accepts_host(Some("internal.example")));
    /// ```
    #[must_use]
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        self.hosts.push(host.into());
        self
    }

    /// Where the console's confirmed redrives, discards and group patches run: a
    /// [`Background`] the service keeps, to stop them when it shuts down (each stored
    /// `stopped`, resumable) rather than leave them cut short. Without it the console keeps
    /// its own.
    #[must_use]
    pub fn background(mut self, background: Background) -> Self {
        self.background = background;
        self
    }

    /// Whether a request with this `Host` (its value, `None` when it has none) is answered:
    /// always with a token; otherwise only for the names [`Options::bound_to`] and
    /// [`Options::allow_host`] describe. What the console checks on every request, for
    /// routes a service adds beside it (`dlq serve`'s `/metrics`).
    ///
    /// ```
    /// let options = dlq_web::Options::default();
    /// assert!(options.accepts_host(Some("127.0.0.1:8080")));
    /// assert!(!options.accepts_host(Some("attacker.example:8080")));
    /// assert!(!options.accepts_host(None));
    /// assert!(options.token("s3cret").accepts_host(Some("attacker.example:8080")));
    /// ```
    pub fn accepts_host(&self, host: Option<&str>) -> bool {
        self.token.is_some() || host.is_some_and(|host| security::host_allowed(host, self.bound, &self.hosts))
    }

    /// Whether a health probe (`dlq serve`'s `/healthz`, which needs no token) with this
    /// `Host` is answered: a `Host` that is an IP address, with any port (load balancers and
    /// kubelets probe by address; a page of another site can make the browser send only its
    /// own name, never an address, so DNS rebinding cannot read through it), or a name the
    /// console answers to without a token ([`Options::bound_to`], [`Options::allow_host`],
    /// loopback names). A token does not widen it: a probe carries none.
    ///
    /// ```
    /// let options = dlq_web::Options::default().token("s3cret").allow_host("dlq.internal.example");
    /// assert!(options.accepts_probe(Some("10.0.0.7:8080")));
    /// assert!(options.accepts_probe(Some("[fd00::7]:8080")));
    /// assert!(options.accepts_probe(Some("dlq.internal.example:8080")));
    /// assert!(!options.accepts_probe(Some("attacker.example:8080")));
    /// assert!(!options.accepts_probe(None));
    /// ```
    pub fn accepts_probe(&self, host: Option<&str>) -> bool {
        host.is_some_and(|host| security::probe_host_allowed(host, self.bound, &self.hosts))
    }

    /// Whether a request with these headers and this query carries the console's token in one
    /// of the forms the console takes (`Authorization: Bearer TOKEN`, the `dlq_token` cookie,
    /// `?token=TOKEN`; compared in constant time); true when no token is set. What the console
    /// checks on every request, for routes a service adds beside it (`dlq serve`'s `/metrics`).
    ///
    /// ```
    /// use axum::http::{HeaderMap, HeaderValue, header};
    /// let options = dlq_web::Options::default().token("s3cret");
    /// let mut headers = HeaderMap::new();
    /// assert!(!options.authorizes(&headers, None));
    /// assert!(options.authorizes(&headers, Some("token=s3cret")));
    /// headers.insert(header::COOKIE, HeaderValue::from_static("dlq_token=s3cret"));
    /// assert!(options.authorizes(&headers, None));
    /// assert!(dlq_web::Options::default().authorizes(&HeaderMap::new(), None));
    /// ```
    pub fn authorizes(&self, headers: &axum::http::HeaderMap, query: Option<&str>) -> bool {
        match &self.token {
            None => true,
            Some(token) => security::presented_token(headers, query).is_some_and(|given| token_matches(token, &given)),
        }
    }

    /// Whether actions are enabled.
    pub const fn actions_allowed(&self) -> bool {
        self.actions
    }
}

/// Compares a presented token with the expected one in constant time (the lengths may leak;
/// the bytes do not): what the console's token check uses, for routes a service adds beside
/// it (`dlq serve`'s `/metrics`).
///
/// ```
/// assert!(dlq_web::token_matches("s3cret", "s3cret"));
/// assert!(!dlq_web::token_matches("s3cret", "s3cre"));
/// ```
pub fn token_matches(expected: &str, given: &str) -> bool {
    security::token_matches(expected, given)
}

/// What every handler gets: the admin layer and the options.
#[derive(Clone)]
pub(crate) struct Console {
    admin: Admin,
    options: Arc<Options>,
    snapshots: Arc<snapshot::Snapshots>,
    runs: Arc<operations::Runs>,
}

impl Console {
    /// The overview's figures (`Admin::stats` with the 10 largest groups), from the snapshot.
    pub(crate) async fn stats(&self) -> Result<Arc<dlq_core::admin::StatsReport>, error::Failure> {
        let admin = self.admin.clone();
        let compute = || async move { Ok(admin.stats(10).await?) };
        Ok(self.snapshots.get("stats".into(), self.options.snapshot_max_age, compute).await?.0)
    }

    /// Drops the snapshots (figures, group lists, charts): an action changed the rows.
    pub(crate) fn forget_snapshots(&self) {
        self.snapshots.clear();
    }

    /// The admin layer acting as the operator of this request.
    pub(crate) fn admin_for(&self, parts: &Parts) -> Admin {
        match self.actor_of(parts) {
            Some(actor) => self.admin.acting_as(actor),
            None => self.admin.clone(),
        }
    }

    /// Whether the [`Options::reveal`] hook lets this request's operator see rows whole.
    pub(crate) fn may_reveal(&self, parts: &Parts) -> bool {
        self.options.reveal.as_ref().is_some_and(|hook| hook(parts))
    }

    /// The operator the [`Options::actor`] hook names for this request, if any.
    pub(crate) fn actor_of(&self, parts: &Parts) -> Option<String> {
        let actor = self.options.actor.as_ref().and_then(|hook| hook(parts))?;
        Some(actor.trim().to_owned()).filter(|a| !a.is_empty())
    }
}

/// The console: HTML pages, the JSON API and the stylesheet, to serve as it is or nest under
/// a prefix. Every action goes through `admin` (acting as the [`Options::actor`] of each
/// request, else as `admin`'s own actor).
///
/// ```
/// use std::sync::Arc;
/// let admin = dlq_core::admin::Admin::new(Arc::new(dlq_core::MemoryStore::new()), "console");
/// let app: axum::Router = axum::Router::new().nest("/dlq", dlq_web::router(admin, dlq_web::Options::default()));
/// # let _ = app;
/// ```
pub fn router(admin: Admin, options: Options) -> Router {
    let body_limit = options.body_limit;
    let console = Console { admin, options: Arc::new(options), snapshots: Arc::default(), runs: Arc::default() };
    let router = table()
        .into_iter()
        .fold(Router::new(), |router, (_, path, handler)| router.route(path, handler))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(console.clone(), security::guard))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(console);
    harden(router)
}

/// The console's edge around `app`: requests past its head limits ([`MAX_URI_BYTES`] a 414,
/// [`MAX_HEADERS`] or [`MAX_HEADER_BYTES`] a 431) refused with a line saying which, and every
/// response, refusals included, with the console's security headers (and a one-line body when
/// an error has none). [`router`] has it; wrap the routes a service serves beside the console
/// in it too (`dlq serve` does, for `/metrics` and `/healthz`).
///
/// The HTTP server in front keeps limits of its own, answered before any route: hyper, which
/// `axum::serve` runs, refuses a request target past 64 KiB, a head past about 400 KiB or more
/// than 100 header fields, and malformed HTTP, with a bare status line and no body. The
/// console's limits are below them, so that an oversized request meets the console's answer;
/// serve through a [`HardenedListener`] to give hyper's own refusals a body and the headers.
///
/// ```
/// let beside = axum::Router::new().route("/healthz", axum::routing::get(|| async { "ok" }));
/// let app: axum::Router = dlq_web::harden(beside);
/// # let _ = app;
/// ```
pub fn harden(app: Router) -> Router {
    app.layer(axum::middleware::from_fn(security::limits)).layer(axum::middleware::map_response(security::headers))
}

/// One route of the console: its method and its path (relative to where the router is
/// nested; `{id}`-style segments are parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Route {
    /// `GET` or `POST`.
    pub method: &'static str,
    /// The path, e.g. `/events/{id}`.
    pub path: &'static str,
}

/// Every route [`router`] serves (the router is built from the same table): what a test that
/// must reach every page walks, so that no new page escapes it (the redaction tests prove no
/// route shows a masked value).
///
/// ```
/// let routes = dlq_web::routes();
/// assert!(routes.iter().any(|r| (r.method, r.path) == ("GET", "/events/{id}")));
/// ```
pub fn routes() -> Vec<Route> {
    table().into_iter().map(|(method, path, _)| Route { method, path }).collect()
}

/// The routes with their handlers, one line a method.
fn table() -> Vec<(&'static str, &'static str, axum::routing::MethodRouter<Console>)> {
    vec![
        ("GET", "/", get(pages::overview)),
        ("GET", "/groups", get(pages::groups)),
        ("GET", "/groups/{fingerprint}", get(pages::group)),
        ("POST", "/groups/{fingerprint}/patch", post(pages::group_patch)),
        ("GET", "/group", get(pages::group_by_query)),
        ("POST", "/group/patch", post(pages::group_patch_by_query)),
        ("GET", "/events", get(pages::events)),
        ("GET", "/events/{id}", get(pages::detail)),
        ("POST", "/events/{id}/edit", post(pages::edit)),
        ("POST", "/events/{id}/reveal", post(pages::reveal)),
        ("POST", "/redrive", post(pages::redrive)),
        ("POST", "/discard", post(pages::discard)),
        ("POST", "/audit/{audit_id}/undo", post(pages::undo)),
        ("GET", "/erase", get(erase::page)),
        ("POST", "/erase", post(erase::erase)),
        ("GET", "/operations/{id}", get(operations::page)),
        ("POST", "/operations/{id}/resume", post(operations::resume)),
        ("GET", "/assets/console.css", get(view::stylesheet)),
        ("GET", "/charts/parked.svg", get(chart::parked)),
        ("GET", "/api/stats", get(api::stats)),
        ("GET", "/api/groups", get(api::groups)),
        ("GET", "/api/events", get(api::events)),
        ("GET", "/api/events/{id}", get(api::detail)),
        ("POST", "/api/events/{id}/patch", post(api::patch)),
        ("POST", "/api/events/{id}/reveal", post(api::reveal)),
        ("POST", "/api/redrive", post(api::redrive)),
        ("POST", "/api/discard", post(api::discard)),
        ("POST", "/api/audit/{audit_id}/undo", post(api::undo)),
        ("GET", "/api/openapi.json", get(openapi::document)),
    ]
}

/// The crate's README, its page on crates.io: its examples run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
