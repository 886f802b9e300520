//! The crate's error type, with the errors of keys ([`SealError`]) and of a changed schema
//! ([`SchemaMismatch`]) it carries.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Errors of `dlq-core` and of the stores built on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A stored value is not one of the known names.
    #[error("invalid {what} `{value}`: expected one of {}", expected.join(", "))]
    Parse {
        /// What was being parsed.
        what: &'static str,
        /// The value found.
        value: String,
        /// The valid values.
        expected: &'static [&'static str],
    },
    /// Two handlers are registered for one event type.
    #[error(
        "event type `{event_type}` is registered twice: by `{first}` at {first_site} and by `{second}` at {second_site}"
    )]
    DuplicateEventType {
        /// The event type.
        event_type: String,
        /// The first handler's path.
        first: String,
        /// Where it is declared.
        first_site: String,
        /// The second handler's path.
        second: String,
        /// Where it is declared.
        second_site: String,
    },
    /// A handler's upcast chain does not have one link per version before its own: rows
    /// parked by an earlier version could not be decoded, so the registry refuses it at
    /// start-up rather than charge every such row a retry.
    #[error(
        "handler `{handler}` (event type `{event_type}`) decodes version {version}, but its upcast chain has {links} link(s) where it needs {}: {}",
        version - 1,
        if (*links as u64) < u64::from(*version) - 1 {
            format!("no upcaster from version {} to {}; name one per version before its own in `upcast = [...]`", links + 1, links + 2)
        } else {
            "it names more upcasters than versions before its own".to_owned()
        }
    )]
    UpcastChain {
        /// The handler's path.
        handler: String,
        /// Its event type.
        event_type: String,
        /// The version it decodes.
        version: u32,
        /// The links its chain has.
        links: usize,
    },
    /// No handler is registered for an event type.
    #[error("no handler is registered for event type `{event_type}`; registered: [{}]", registered.join(", "))]
    UnknownEventType {
        /// The event type asked for.
        event_type: String,
        /// The registered event types, sorted.
        registered: Vec<String>,
    },
    /// A handler takes `State<T>` and the retrier's context has no `T`: every retry would
    /// fail, so the retrier refuses to start.
    #[error(
        "handler `{handler}` (event type `{event_type}`) takes `State<{type_name}>`, but the retrier's context has no `{type_name}`: add it with `Context::new().with(value)` and pass the context to the retrier"
    )]
    MissingState {
        /// The handler's path.
        handler: String,
        /// Its event type.
        event_type: String,
        /// The missing type.
        type_name: String,
    },
    /// Keys or a sealed row (`sealed`): names the key id, never key bytes or content.
    #[error(transparent)]
    Sealed(#[from] SealError),
    /// No store is installed for the live path.
    #[error(
        "no dead-letter store is installed: call `dlq_core::install_store` at start-up or wrap the call in `dlq_core::with_store`"
    )]
    NoStore,
    /// A store was already installed.
    #[error("a dead-letter store is already installed")]
    StoreAlreadyInstalled,
    /// The store failed (connection, query, timeout).
    #[error("dead-letter store failed: {0}")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The store did not answer in time.
    #[error("dead-letter store did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// The row does not exist.
    #[error("dead letter {0} not found")]
    NotFound(i64),
    /// The operation does not apply to the row in its current state.
    #[error("dead letter {id} is {status}: {action} needs {needs}")]
    InvalidState {
        /// The row.
        id: i64,
        /// Its status.
        status: crate::record::Status,
        /// The action tried.
        action: &'static str,
        /// The status the action needs.
        needs: &'static str,
    },
    /// The row's payload is not in the version an upgrade starts from: another upgrade, or a
    /// retry, rewrote it first.
    #[error("dead letter {id} holds payload version {found}, not {expected}")]
    VersionChanged {
        /// The row.
        id: i64,
        /// The version the upgrade starts from.
        expected: u32,
        /// The row's version.
        found: u32,
    },
    /// The store refuses new rows (`max_entries` with the `reject` policy).
    #[error("dead-letter store is full ({entries} of {max} entries)")]
    Full {
        /// Rows stored.
        entries: u64,
        /// The limit.
        max: u64,
    },
    /// A payload given to a store call is over the store's size limit (a patch is refused
    /// rather than cut).
    #[error("payload of {len} bytes is over the store's limit of {max} bytes")]
    PayloadTooLarge {
        /// The payload's size.
        len: usize,
        /// The store's limit.
        max: usize,
    },
    /// A configuration value could not be used.
    #[error("invalid configuration{}{}: {reason}", file.as_ref().map(|f| format!(" in {f}")).unwrap_or_default(), if key.is_empty() { String::new() } else { format!(" at `{key}`") })]
    Config {
        /// The key (`dlq.retry.batch-size`) or environment variable; empty for a syntax error.
        key: String,
        /// The file, when it came from one.
        file: Option<String>,
        /// What is wrong with it.
        reason: String,
    },
    /// A configuration file could not be read.
    #[error("could not read configuration file {path}")]
    ConfigFile {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The store does not offer what the configuration asks for.
    #[error("{store} does not support {what}")]
    Unsupported {
        /// The store.
        store: &'static str,
        /// The feature.
        what: &'static str,
    },
    /// A bulk operation's cursor was moved by another process: this batch was rolled back.
    #[error("operation {operation} was advanced by another process; nothing was moved by this batch")]
    Conflict {
        /// The operation.
        operation: i64,
    },
    /// No bulk operation has this id.
    #[error("operation {0} not found")]
    OperationNotFound(i64),
    /// No audit entry has this id.
    #[error("audit entry {0} not found")]
    AuditNotFound(i64),
    /// An operator's request cannot be carried out as given (a missing reason, a patch that
    /// does not apply, an audit entry that cannot be undone).
    #[error("{0}")]
    Invalid(String),
    /// A retrier's handler declares a version whose schema in the store's type catalog has
    /// another shape than its event's: a changed event without a version bump, refused before
    /// any row is claimed (the message names the type, the versions and the fix).
    #[error("{0}")]
    SchemaChanged(Box<SchemaMismatch>),
    /// An event could not be serialized for parking.
    #[error("event could not be serialized: {0}")]
    Serialize(#[source] serde_json::Error),
}

impl Error {
    /// Wraps any store error.
    pub fn store(err: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Store(Box::new(err))
    }
}

/// What goes wrong with keys and sealed rows. Messages name key ids, never key bytes nor
/// sealed content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// Nothing provides keys.
    #[error(
        "no key ring is configured ({hint}): set DLQ_KEYS (and DLQ_ACTIVE_KEY), or call dlq_core::sealed::install_keys at start-up"
    )]
    NoKeyProvider {
        /// What was looked for.
        hint: String,
    },
    /// An encrypted event type without a key ring: refused, never parked in clear.
    #[error(
        "event type `{event_type}` is encrypted (`encrypt = true`) but no key ring is configured: set DLQ_KEYS (and DLQ_ACTIVE_KEY), or call dlq_core::sealed::install_keys at start-up"
    )]
    NotConfigured {
        /// The event type.
        event_type: String,
    },
    /// The row was sealed under a key the ring does not hold.
    #[error("no key `{key}` in the key ring (it holds {held}): load a ring that has `{key}` to open this row")]
    UnknownKey {
        /// The key the row names.
        key: String,
        /// The ids the ring holds.
        held: String,
    },
    /// The key opened nothing: another key under the same id, or changed bytes.
    #[error(
        "data sealed under key `{key}` does not authenticate: the key with that id is not the one it was sealed with, or the stored bytes were changed"
    )]
    Unauthentic {
        /// The key id.
        key: String,
    },
    /// A sealed value that is not in dlq's format.
    #[error("malformed sealed value: {reason}")]
    Malformed {
        /// What is wrong.
        reason: String,
    },
    /// Keys that cannot be used.
    #[error("invalid keys: {reason}")]
    BadKeys {
        /// What is wrong (ids and positions, never bytes).
        reason: String,
    },
}

/// One version of an event type published with two event shapes: the one it was first
/// published with (its contract) and another (`Catalog::mismatches`, and a retrier's
/// refusal to start, [`Error::SchemaChanged`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SchemaMismatch {
    /// The event type.
    pub event_type: String,
    /// The version published with two shapes.
    pub version: u32,
    /// The newest version of the type the catalog knows of.
    pub newest: u32,
    /// Who published the version's contract, and when.
    pub published_by: String,
    /// When the contract was first published.
    pub published_at: DateTime<Utc>,
    /// Who published the other shape (a retrier refusing to start: its owner).
    pub differing_by: String,
}
