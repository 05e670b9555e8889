//! EC2NodeClass (karpenter.k8s.aws/v1): the types with their CRD schema (the `kubelet` block in [`kubelet`]), the
//! defaults the webhook applies to the raw JSON, and the rule checks (api-rules.md §3).

mod defaults;
mod kubelet;
mod types;
mod validation;

pub use defaults::{default_ec2nodeclass, default_metadata_options};
pub use kubelet::{KubeletConfiguration, EVICTION_THRESHOLD_PATTERN};
pub use types::*;
pub use validation::validate_ec2nodeclass;
