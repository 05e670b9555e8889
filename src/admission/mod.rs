//! The kinds kerf admits: NodePool and EC2NodeClass defaulting and validation (and, later, pod advice).

mod pipeline;

pub use pipeline::{typed_rules, Admitted, KindAdmission};

use crate::api::{crds, nodepool};

/// NodePool (karpenter.sh/v1).
pub static NODEPOOL: KindAdmission = KindAdmission {
    group: "karpenter.sh",
    kind: "NodePool",
    default: nodepool::default_nodepool,
    schema: crds::nodepool_schema,
    rules: |new, old, findings| typed_rules(new, old, findings, nodepool::validate_nodepool),
};
