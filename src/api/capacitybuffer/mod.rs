//! CapacityBuffer (autoscaling.x-k8s.io/v1beta1): types and validation. What a buffer keeps is the engine's
//! (`engine::buffers`).

mod types;
mod validation;

pub use types::*;
pub use validation::validate_capacitybuffer;
