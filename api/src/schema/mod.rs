//! The OpenAPI side of the API: schema fragments for the CRDs, and a generic structural-schema check that
//! reports what the apiserver's schema validation would (api-rules.md §1.1 step 3).

mod check;
pub mod fragments;

pub use check::{prune_nulls, CompiledSchema, SchemaError, SchemaReport};
