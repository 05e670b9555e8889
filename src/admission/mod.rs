//! The kinds kerf admits: NodePool and EC2NodeClass defaulting and validation, and pod advice.

pub mod advice;
mod hooks;
mod pipeline;
pub mod pods;
pub mod spot;
mod unparsed;

pub use hooks::ObjectHook;

pub use pipeline::{typed_rules, Admitted, KindAdmission};

use crate::api::{capacitybuffer, crds, ec2nodeclass, nodeoverlay, nodepool};

/// NodePool (karpenter.sh/v1).
pub static NODEPOOL: KindAdmission = KindAdmission {
    group: "karpenter.sh",
    kind: "NodePool",
    default: nodepool::default_nodepool,
    schema: crds::nodepool_schema,
    rules: |new, old, findings| typed_rules(new, old, findings, nodepool::validate_nodepool),
};

/// EC2NodeClass (karpenter.k8s.aws/v1).
pub static EC2NODECLASS: KindAdmission = KindAdmission {
    group: "karpenter.k8s.aws",
    kind: "EC2NodeClass",
    default: ec2nodeclass::default_ec2nodeclass,
    schema: crds::ec2nodeclass_schema,
    rules: |new, old, findings| {
        typed_rules(new, old, findings, |nc, _, f| {
            ec2nodeclass::validate_ec2nodeclass(nc, f)
        })
    },
};

/// NodeOverlay (karpenter.sh/v1alpha1): no defaults.
pub static NODEOVERLAY: KindAdmission = KindAdmission {
    group: "karpenter.sh",
    kind: "NodeOverlay",
    default: |_| {},
    schema: crds::nodeoverlay_schema,
    rules: |new, old, findings| {
        typed_rules(new, old, findings, |o, _, f| {
            nodeoverlay::validate_nodeoverlay(o, f)
        })
    },
};

/// CapacityBuffer (autoscaling.x-k8s.io/v1beta1): `provisioningStrategy` defaults to active capacity, as its CRD
/// does.
pub static CAPACITYBUFFER: KindAdmission = KindAdmission {
    group: "autoscaling.x-k8s.io",
    kind: "CapacityBuffer",
    default: |object| {
        if let Some(spec) = object.get_mut("spec").and_then(|s| s.as_object_mut()) {
            spec.entry("provisioningStrategy")
                .or_insert_with(|| capacitybuffer::ACTIVE_CAPACITY.into());
        }
    },
    schema: crds::capacitybuffer_schema,
    rules: |new, old, findings| {
        typed_rules(new, old, findings, |b, _, f| {
            capacitybuffer::validate_capacitybuffer(b, f)
        })
    },
};

/// The kind kerf admits for an `apiVersion` group and `kind`, if any.
pub fn for_kind(group: &str, kind: &str) -> Option<&'static KindAdmission> {
    [&NODEPOOL, &EC2NODECLASS, &NODEOVERLAY, &CAPACITYBUFFER]
        .into_iter()
        .find(|k| k.group == group && k.kind == kind)
}
