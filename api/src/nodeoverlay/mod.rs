//! NodeOverlay (karpenter.sh/v1alpha1): types and validation. What an overlay does to instance types is the
//! engine's (`engine::overlay`).

mod types;
mod validation;

pub use types::*;
pub use validation::{runtime_validation, validate_nodeoverlay};
