//! What can go wrong at the cloud edge, in the terms controllers act on.

use std::time::Duration;

use thiserror::Error;

use super::ice::OfferingKey;

/// An error from a [`CloudProvider`](super::CloudProvider).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum CloudError {
    /// The instance does not exist (any more): termination treats this as success.
    #[error("instance {provider_id} not found")]
    NotFound { provider_id: String },
    /// Every offering the launch could use was out of capacity (or none was left to try); the offerings
    /// tried are in the ICE cache now. Karpenter deletes the claim and plans again.
    #[error("all requested instance types were unavailable during launch ({} offerings tried)", offerings.len())]
    InsufficientCapacity { offerings: Vec<OfferingKey> },
    /// The EC2NodeClass cannot be launched from yet: a selector matched nothing, or it is not resolved.
    #[error("EC2NodeClass {name} is not ready: {reason}")]
    NodeClassNotReady { name: String, reason: String },
    /// The request itself is unusable (bad requirements, a provider ID kerf does not understand).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// The cloud API answered with an error.
    #[error("{operation} failed: {code}: {message}")]
    Api {
        operation: &'static str,
        code: String,
        message: String,
    },
    /// The instance is in a zone an ARC zonal shift moves traffic away from: it is left alone (no terminate
    /// call, which could pile retries onto the impaired zone) until the shift ends, and the caller tries again.
    #[error("instance {instance_id} is in zonally shifted availability zone {zone} ({zone_id}), skipping termination")]
    ZonallyShifted {
        instance_id: String,
        zone: String,
        zone_id: String,
    },
    /// The cloud API did not answer in time.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        operation: &'static str,
        after: Duration,
    },
}

impl CloudError {
    /// A short, stable label for metrics and Events.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CloudError::NotFound { .. } => "not_found",
            CloudError::InsufficientCapacity { .. } => "insufficient_capacity",
            CloudError::NodeClassNotReady { .. } => "nodeclass_not_ready",
            CloudError::InvalidRequest(_) => "invalid_request",
            CloudError::Api { .. } => "api_error",
            CloudError::ZonallyShifted { .. } => "zonally_shifted",
            CloudError::Timeout { .. } => "timeout",
        }
    }
}
