//! CapacityBuffer (autoscaling.x-k8s.io/v1beta1): types and validation. What a buffer keeps is the engine's
//! (`engine::buffers`).

mod types;
mod validation;

pub use types::*;
pub use validation::validate_capacitybuffer;

use crate::well_known::FAKE_POD;
use k8s_openapi::api::core::v1::Pod;

/// Whether `pod` is a buffer's virtual pod: it stands for headroom, no pod object exists (what disruption and the
/// simulator tell apart from real pods).
pub fn is_virtual(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.get(FAKE_POD).is_some_and(|v| v == "true"))
}
