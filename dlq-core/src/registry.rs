//! The map from event type to handler, checked once at start-up.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::Error;
use crate::handler::Registration;

/// The handlers a process knows, by event type.
///
/// Built from every `#[dead_letter]` handler linked into the binary by [`registry()`], or from
/// an explicit list with [`handlers!`](macro@crate::handlers). Both fail on a duplicate event type,
/// naming both handlers and their source lines.
///
/// `inventory`'s caveats apply to [`registry()`]: only handlers in code that is linked into the
/// binary register (a handler in a crate nothing else references may be dropped by the linker),
/// and registrations come in no particular order (the registry sorts them).
///
/// ```
/// #[dlq_core::dead_letter(event_type = "doc-registry")]
/// async fn on_signup(user: String) -> Result<(), std::io::Error> { Ok(()) }
///
/// let registry = dlq_core::handlers::registry().expect("no duplicate event types");
/// assert!(registry.event_types().any(|t| t == "doc-registry"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Registry {
    by_type: BTreeMap<&'static str, &'static Registration>,
}

impl Registry {
    /// Builds a registry from registrations; a duplicate event type is an error.
    pub fn from_registrations(registrations: impl IntoIterator<Item = &'static Registration>) -> Result<Self, Error> {
        let registry = Self::check(registrations).map_err(|(a, b)| duplicate(a, b))?;
        registry.check_subject_key()?;
        registry.check_upcast_chains()?;
        Ok(registry)
    }

    /// Refuses to start when an event type declares a subject (`subject = "/pointer"`) and
    /// no subject key is configured: its rows would be parked unerasable by subject.
    fn check_subject_key(&self) -> Result<(), Error> {
        match self.iter().find(|reg| reg.subject.is_some()) {
            Some(reg) => {
                crate::subject::required_key(&format!("event type `{}` (subject = ...)", reg.event_type)).map(|_| ())
            }
            None => Ok(()),
        }
    }

    /// Every handler has one upcaster per version before its own. `#[dead_letter]` checks
    /// this when it compiles; this catches registrations made otherwise.
    fn check_upcast_chains(&self) -> Result<(), Error> {
        match self.iter().find(|reg| reg.upcast.len() as u64 != u64::from(reg.version) - 1) {
            Some(reg) => Err(Error::UpcastChain {
                handler: reg.handler.to_owned(),
                event_type: reg.event_type.to_owned(),
                version: reg.version,
                links: reg.upcast.len(),
            }),
            None => Ok(()),
        }
    }

    /// The registry, or the first two registrations that share an event type, in source order.
    fn check(
        registrations: impl IntoIterator<Item = &'static Registration>,
    ) -> Result<Self, (&'static Registration, &'static Registration)> {
        let mut by_type: BTreeMap<&'static str, &'static Registration> = BTreeMap::new();
        for reg in registrations {
            if let Some(first) = by_type.get(reg.event_type) {
                // Report in a stable order whatever order inventory yields.
                let first = *first;
                return Err(if (first.file, first.line) <= (reg.file, reg.line) { (first, reg) } else { (reg, first) });
            }
            by_type.insert(reg.event_type, reg);
        }
        Ok(Self { by_type })
    }

    /// The handler for `event_type`, or an error listing the registered types, sorted.
    pub fn get(&self, event_type: &str) -> Result<&'static Registration, Error> {
        self.by_type.get(event_type).copied().ok_or_else(|| Error::UnknownEventType {
            event_type: event_type.to_owned(),
            registered: self.event_types().map(str::to_owned).collect(),
        })
    }

    /// The registered event types, sorted.
    pub fn event_types(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.by_type.keys().copied()
    }

    /// The registrations, sorted by event type.
    pub fn iter(&self) -> impl Iterator<Item = &'static Registration> + '_ {
        self.by_type.values().copied()
    }

    /// Checks that `context` holds a value for every `State<T>` argument of every handler.
    ///
    /// # Errors
    /// [`Error::MissingState`] naming the first handler and type found missing.
    ///
    /// ```
    /// use dlq_core::{dead_letter, handlers, Context, State};
    ///
    /// #[derive(Clone)]
    /// struct Ledger;
    ///
    /// #[dead_letter(event_type = "doc-check-context")]
    /// async fn handle(n: u64, _ledger: State<Ledger>) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let registry = handlers![handle].unwrap();
    /// assert!(registry.check_context(&Context::new()).is_err());
    /// assert!(registry.check_context(&Context::new().with(Ledger)).is_ok());
    /// ```
    pub fn check_context(&self, context: &crate::Context) -> Result<(), Error> {
        for reg in self.iter() {
            if let Some(type_name) = (reg.missing_state)(context) {
                return Err(Error::MissingState {
                    handler: reg.handler.to_owned(),
                    event_type: reg.event_type.to_owned(),
                    type_name: type_name.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The type catalog's records of its handlers ([`crate::catalog`]), published by `owner`.
    ///
    /// ```
    /// #[dlq_core::dead_letter(event_type = "doc-catalog", version = 2, upcast = [dlq_core::handlers::unchanged])]
    /// async fn handle(n: u64) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// let catalog = dlq_core::handlers![handle].unwrap().catalog("host:1:doc");
    /// assert_eq!((catalog[0].event_type.as_str(), catalog[0].version, catalog[0].upcast_from), ("doc-catalog", 2, 1));
    /// ```
    pub fn catalog(&self, owner: &str) -> Vec<crate::catalog::EventTypeInfo> {
        self.iter().map(|reg| crate::catalog::EventTypeInfo::of(reg, owner)).collect()
    }

    /// Publishes [`catalog`](Self::catalog) into `store` (what a [`Retrier`](crate::Retrier)
    /// does when it starts): for a process that handles events without a retrier.
    ///
    /// # Errors
    /// The store's.
    ///
    /// ```
    /// use dlq_core::{store::prelude::*, MemoryStore};
    ///
    /// #[dlq_core::dead_letter(event_type = "doc-publish")]
    /// async fn handle(n: u64) -> Result<(), std::io::Error> { Ok(()) }
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = MemoryStore::new();
    /// dlq_core::handlers![handle].unwrap().publish(&store, "dispatcher-1").await?;
    /// assert_eq!(store.event_types().await?[0].published_by, "dispatcher-1");
    /// # Ok::<(), dlq_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub async fn publish<S: crate::DeadLetterStore + ?Sized>(&self, store: &S, owner: &str) -> Result<(), Error> {
        store.publish_types(self.catalog(owner)).await
    }

    /// How many handlers are registered.
    pub fn len(&self) -> usize {
        self.by_type.len()
    }

    /// Whether no handler is registered.
    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }
}

/// The registry of every `#[dead_letter]` handler in the binary, checked once.
///
/// The first call collects and checks the registrations; later calls return the same result.
/// Call it at start-up so that a duplicate event type stops the process before any event is
/// handled.
///
/// # Errors
/// [`Error::DuplicateEventType`] naming both handlers and their `file:line`;
/// [`Error::UpcastChain`] for a handler without one upcaster per version before its own.
pub fn registry() -> Result<&'static Registry, Error> {
    type Checked = Result<Registry, (&'static Registration, &'static Registration)>;
    static REGISTRY: OnceLock<Checked> = OnceLock::new();
    match REGISTRY.get_or_init(|| Registry::check(inventory::iter::<Registration>())) {
        Ok(registry) => registry.check_subject_key().and_then(|()| registry.check_upcast_chains()).map(|()| registry),
        Err((a, b)) => Err(duplicate(a, b)),
    }
}

fn duplicate(first: &Registration, second: &Registration) -> Error {
    Error::DuplicateEventType {
        event_type: first.event_type.to_owned(),
        first: first.handler.to_owned(),
        first_site: first.site(),
        second: second.handler.to_owned(),
        second_site: second.site(),
    }
}

impl crate::catalog::Catalog {
    /// The catalog `store` holds, with its versions' schemas.
    ///
    /// # Errors
    /// The store's.
    pub async fn read<S: crate::DeadLetterStore + ?Sized>(store: &S) -> Result<Self, crate::Error> {
        Ok(Self::new(store.event_types().await?).with_schemas(store.version_schemas().await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::__private::{HandlerOutcome, Invocation};
    use crate::backoff::RetryPolicy;
    use crate::store::BoxFuture;

    fn noop(_: Invocation) -> BoxFuture<'static, HandlerOutcome> {
        Box::pin(async { HandlerOutcome::Succeeded })
    }

    const fn reg(event_type: &'static str, handler: &'static str, line: u32) -> Registration {
        Registration {
            event_type,
            version: 1,
            upcast: &[],
            handler,
            file: "src/handlers.rs",
            line,
            policy: RetryPolicy::DEFAULT,
            breaker: None,
            dispatch: noop,
            check: crate::handler::accepts_any,
            missing_state: crate::handler::needs_no_state,
            sealing: None,
            subject: None,
            redact: &[],
            schemas: None,
        }
    }

    #[test]
    fn a_chain_without_a_link_per_earlier_version_is_refused_at_start_up() {
        static GAP: Registration = Registration { version: 3, upcast: &[crate::upcast::unchanged], ..PAY_A };
        let err = Registry::from_registrations([&REFUND, &GAP]).unwrap_err().to_string();
        assert_eq!(
            err,
            "handler `app::a::handle_payment` (event type `payment`) decodes version 3, but its upcast chain has 1 \
             link(s) where it needs 2: no upcaster from version 2 to 3; name one per version before its own in \
             `upcast = [...]`"
        );
        static EXTRA: Registration = Registration { upcast: &[crate::upcast::unchanged], ..PAY_A };
        let err = Registry::from_registrations([&EXTRA]).unwrap_err().to_string();
        assert!(err.ends_with("needs 0: it names more upcasters than versions before its own"), "{err}");
        static WHOLE: Registration = Registration { version: 2, upcast: &[crate::upcast::unchanged], ..PAY_A };
        assert!(Registry::from_registrations([&WHOLE]).is_ok());
    }

    static PAY_A: Registration = reg("payment", "app::a::handle_payment", 10);
    static PAY_B: Registration = reg("payment", "app::b::handle_payment", 20);
    static REFUND: Registration = reg("refund", "app::handle_refund", 30);
    static WITH_SUBJECT: Registration = reg("card", "app::handle_card", 40).with_subject("/holder_id");

    /// A type that declares a subject cannot start without the key its rows are hashed with:
    /// they would be parked unerasable. The only test of this binary that installs a key.
    #[test]
    fn a_subject_without_a_key_stops_the_start() {
        if std::env::var_os(crate::subject::KEY_ENV).is_none() {
            let err = Registry::from_registrations([&REFUND, &WITH_SUBJECT]).unwrap_err().to_string();
            assert!(
                err.contains("event type `card` (subject = ...) needs a subject key: set DLQ_SUBJECT_KEY"),
                "{err}"
            );
        }
        let _ = crate::subject::install_key(crate::subject::SubjectKey::new([9; 32]).unwrap());
        assert_eq!(Registry::from_registrations([&REFUND, &WITH_SUBJECT]).unwrap().len(), 2);
        assert!(Registry::from_registrations([&REFUND]).is_ok(), "no subject, no key needed");
    }

    #[test]
    fn duplicate_event_type_names_both_handlers_in_stable_order() {
        for order in [[&PAY_B, &REFUND, &PAY_A], [&PAY_A, &REFUND, &PAY_B]] {
            let err = Registry::from_registrations(order).unwrap_err();
            assert_eq!(
                err.to_string(),
                "event type `payment` is registered twice: by `app::a::handle_payment` at src/handlers.rs:10 \
                 and by `app::b::handle_payment` at src/handlers.rs:20"
            );
        }
    }

    #[test]
    fn unknown_type_lists_registered_ones_sorted() {
        let registry = Registry::from_registrations([&REFUND, &PAY_A]).unwrap();
        let err = registry.get("payout").unwrap_err();
        assert_eq!(err.to_string(), "no handler is registered for event type `payout`; registered: [payment, refund]");
        assert_eq!(registry.get("refund").unwrap().handler, "app::handle_refund");
        assert_eq!(registry.len(), 2);
    }
}
