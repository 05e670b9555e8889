//! NodePool (karpenter.sh/v1): types, defaults and validation.

mod defaults;
mod types;
mod validation;

pub use defaults::default_nodepool;
pub use types::*;
pub use validation::validate_nodepool;
pub(crate) use validation::{is_single_non_negative_integer, validate_requirement};
