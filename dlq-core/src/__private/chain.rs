//! What `#[dead_letter(version = N, upcast = [...])]` expands to: each named upcaster erased to
//! JSON for the registry ([`Link::run`]), and the compile-time check that the chain joins up:
//! each link takes what the link before it returns, and the last returns the handler's event.
//! A link on `serde_json::Value` joins any neighbour (checked when it runs instead).

use std::marker::PhantomData;

use serde_json::Value;

use crate::upcast::UpcastError;

/// A function that brings one version's event to the next.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not an upcaster of `#[dead_letter]`",
    label = "not `fn(Old) -> Result<New, dlq_core::handlers::UpcastError>`",
    note = "an upcaster is a function `fn(Old) -> Result<New, dlq_core::handlers::UpcastError>` from one version's event to the next, or `fn(serde_json::Value) -> Result<serde_json::Value, dlq_core::handlers::UpcastError>` on the JSON itself"
)]
pub trait Upcaster<A, B> {
    fn __dlq_upcast(&self, old: A) -> Result<B, UpcastError>;
}

#[diagnostic::do_not_recommend]
impl<F: Fn(A) -> Result<B, UpcastError>, A, B> Upcaster<A, B> for F {
    fn __dlq_upcast(&self, old: A) -> Result<B, UpcastError> {
        self(old)
    }
}

/// One named upcaster, from `A` to `B`. It keeps its call, so that [`Link::run`] needs no
/// `Upcaster` bound: a function that is not an upcaster is reported once, by [`Link::of`].
pub struct Link<F, A, B> {
    f: F,
    call: fn(&F, A) -> Result<B, UpcastError>,
}

impl<F: Upcaster<A, B>, A, B> Link<F, A, B> {
    pub const fn of(f: F) -> Self {
        Self { f, call: <F as Upcaster<A, B>>::__dlq_upcast }
    }
}

impl<F, A: serde::de::DeserializeOwned, B: serde::Serialize> Link<F, A, B> {
    /// Runs the upcaster on the JSON of its version, giving the JSON of the next.
    ///
    /// # Errors
    /// The upcaster's, or why the JSON is not an `A` (or a `B` not JSON).
    pub fn run(&self, old: Value) -> Result<Value, UpcastError> {
        let old = A::deserialize(old).map_err(|e| {
            UpcastError::new(format!("the payload does not deserialize into `{}`: {e}", std::any::type_name::<A>()))
        })?;
        let new = (self.call)(&self.f, old)?;
        serde_json::to_value(new).map_err(UpcastError::caused_by)
    }
}

/// What one link returns (`O`) beside what the next takes (`I`).
pub struct Pair<O, I>(PhantomData<fn() -> (O, I)>);

impl<O, I> Pair<O, I> {
    /// The output of `before` beside the input of `after`.
    pub const fn of<F, A, G, D>(_before: &Link<F, A, O>, _after: &Link<G, I, D>) -> Self {
        Self(PhantomData)
    }

    /// The output of the last link beside the handler's event type `I`.
    pub const fn last<F, A>(_last: &Link<F, A, O>, _event: PhantomData<I>) -> Self {
        Self(PhantomData)
    }
}

/// The two sides fit.
pub struct Fits;
/// They do not.
pub struct Mismatch;

pub trait ViaSame {
    fn __dlq_joins(&self) -> Fits;
}
impl<T> ViaSame for &&&Pair<T, T> {
    fn __dlq_joins(&self) -> Fits {
        Fits
    }
}

pub trait ViaFromJson {
    fn __dlq_joins(&self) -> Fits;
}
impl<T> ViaFromJson for &&Pair<Value, T> {
    fn __dlq_joins(&self) -> Fits {
        Fits
    }
}

pub trait ViaToJson {
    fn __dlq_joins(&self) -> Fits;
}
impl<T> ViaToJson for &Pair<T, Value> {
    fn __dlq_joins(&self) -> Fits {
        Fits
    }
}

pub trait ViaMismatch {
    fn __dlq_joins(&self) -> Mismatch;
}
impl<O, I> ViaMismatch for Pair<O, I> {
    fn __dlq_joins(&self) -> Mismatch {
        Mismatch
    }
}

/// Two neighbouring links of a chain fit.
#[diagnostic::on_unimplemented(
    message = "an upcaster of the chain returns `{O}`, but the next one takes `{I}`",
    label = "this upcaster does not take what the one before it returns",
    note = "each upcaster of `upcast = [...]` takes the event the one before it returns"
)]
pub trait Joins<O, I> {}
impl<O, I> Joins<O, I> for Fits {}

/// The last link returns the handler's event.
#[diagnostic::on_unimplemented(
    message = "the last upcaster of the chain returns `{O}`, but the handler takes `{I}`",
    label = "this upcaster does not return the handler's event",
    note = "the last upcaster of `upcast = [...]` returns the event type the handler takes"
)]
pub trait Ends<O, I> {}
impl<O, I> Ends<O, I> for Fits {}

pub fn joins<O, I, T: Joins<O, I>>(_: &Pair<O, I>, _: T) {}

pub fn ends<O, I, T: Ends<O, I>>(_: &Pair<O, I>, _: T) {}

#[cfg(test)]
#[allow(clippy::needless_borrow, reason = "autoref specialization is chosen by the number of references")]
mod tests {
    use super::*;

    fn add(n: u32) -> Result<u64, UpcastError> {
        Ok(u64::from(n) + 1)
    }

    fn json(v: Value) -> Result<Value, UpcastError> {
        Ok(v)
    }

    fn is_fit(_: Fits) {}

    #[test]
    fn links_run_on_json_and_join_typed_or_through_json() {
        let typed = Link::of(add);
        assert_eq!(typed.run(serde_json::json!(1)).unwrap(), serde_json::json!(2));
        let err = typed.run(serde_json::json!("x")).unwrap_err().to_string();
        assert!(err.starts_with("the payload does not deserialize into `u32`"), "{err}");
        let json_link = Link::of(json);
        is_fit((&&&Pair::of(&typed, &json_link)).__dlq_joins());
        is_fit((&&&Pair::of(&json_link, &typed)).__dlq_joins());
        is_fit((&&&Pair::last(&typed, PhantomData::<u64>)).__dlq_joins());
        let Mismatch = (&&&Pair::of(&typed, &typed)).__dlq_joins();
    }
}
