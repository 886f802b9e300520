//! What `#[dead_letter]` expands to for the type catalog's JSON Schemas: the schema of the
//! handler's event type and of each upcaster's input type (the older versions), for the types
//! that implement `schemars::JsonSchema`, and none for the others. Autoref specialization picks
//! [`ViaJsonSchema`] when the type implements it (and the `schemars` feature is on), else
//! [`ViaNoSchema`]: no handler has to derive `JsonSchema`.

use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde_json::Value;

use super::chain::Link;
use crate::catalog::Schemas;
use crate::handler::Registration;

/// Stands for the type `T` whose schema is asked for.
pub struct SchemaProbe<T>(PhantomData<fn() -> T>);

impl<T> SchemaProbe<T> {
    pub const fn new() -> Self {
        Self(PhantomData)
    }

    /// The probe of what `link` takes: the event of the version before it.
    pub const fn input<F, B>(_link: &Link<F, T, B>) -> Self {
        Self(PhantomData)
    }
}

/// The type implements `schemars::JsonSchema`: its schema (JSON Schema 2020-12).
pub trait ViaJsonSchema {
    fn __dlq_schema(&self) -> Option<Value>;
}
#[cfg(feature = "schemars")]
impl<T: schemars::JsonSchema> ViaJsonSchema for &SchemaProbe<T> {
    fn __dlq_schema(&self) -> Option<Value> {
        Some(schemars::SchemaGenerator::default().into_root_schema_for::<T>().to_value())
    }
}

/// Any other type: no schema (tools then check the row's version only).
pub trait ViaNoSchema {
    fn __dlq_schema(&self) -> Option<Value>;
}
impl<T> ViaNoSchema for SchemaProbe<T> {
    fn __dlq_schema(&self) -> Option<Value> {
        None
    }
}

/// The schemas a handler exports, from `(version, schema)` pairs.
pub fn schemas<const N: usize>(by_version: [(u32, Option<Value>); N]) -> Schemas {
    Schemas(by_version.into_iter().filter_map(|(version, schema)| Some((version, schema?))).collect::<BTreeMap<_, _>>())
}

/// `reg` with the function giving its schemas (published in the type catalog).
pub const fn with_schemas(mut reg: Registration, schemas: fn() -> Schemas) -> Registration {
    reg.schemas = Some(schemas);
    reg
}

#[cfg(all(test, feature = "schemars"))]
#[allow(clippy::needless_borrow, reason = "autoref specialization is chosen by the number of references")]
mod tests {
    use super::*;
    use crate::upcast::UpcastError;

    #[derive(schemars::JsonSchema)]
    #[allow(dead_code, reason = "only its schema is used")]
    struct Described {
        id: u64,
    }

    struct Plain;

    fn upcast(old: Described) -> Result<u32, UpcastError> {
        Ok(u32::try_from(old.id).unwrap_or(0))
    }

    #[test]
    fn a_type_with_json_schema_exports_it_and_others_none() {
        let described = (&&SchemaProbe::<Described>::new()).__dlq_schema().unwrap();
        assert_eq!(described["properties"]["id"]["type"], "integer");
        assert_eq!((&&SchemaProbe::<Plain>::new()).__dlq_schema(), None);
        let link = Link::of(upcast);
        let input = (&&SchemaProbe::input(&link)).__dlq_schema().unwrap();
        assert_eq!(input["required"], serde_json::json!(["id"]), "the upcaster's input type's schema");
        let Schemas(map) = schemas([(2, None), (1, Some(input))]);
        assert_eq!(map.keys().copied().collect::<Vec<_>>(), [1]);
    }
}
