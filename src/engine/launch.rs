//! What a launched node is labelled and annotated with, in one place for the controller (which writes it to
//! the NodeClaim and, at registration, to the Node) and `kerf simulate` (which builds its Nodes from it), so
//! that a pod selecting `karpenter.k8s.aws/instance-generation` lands the same way in both, and drift on any
//! instance-type label is seen the same way in both.

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::{CapacityType, InstanceType};
use std::collections::BTreeMap;

/// The labels a claim gets once its instance is known: every single-valued label of its instance type
/// (architecture, family, generation, size, CPU, memory, region, …), then the instance's own type, zone and
/// capacity type.
pub fn launched_labels(
    instance_type: Option<&InstanceType>,
    name: &str,
    zone: &str,
    capacity_type: CapacityType,
) -> BTreeMap<String, String> {
    let mut out = instance_type
        .map(|t| t.requirements.labels())
        .unwrap_or_default();
    out.insert(labels::INSTANCE_TYPE.into(), name.to_owned());
    out.insert(labels::ZONE.into(), zone.to_owned());
    out.insert(
        labels::CAPACITY_TYPE.into(),
        capacity_type.as_str().to_owned(),
    );
    out
}

/// The labels a kubelet puts on the Node it registers, on an EC2 instance of `instance_type` in `zone`:
/// hostname, type, zone, region, architecture and OS (Linux: kerf launches no Windows AMI families).
pub fn kubelet_labels(
    node_name: &str,
    instance_type: &InstanceType,
    zone: &str,
    region: &str,
) -> BTreeMap<String, String> {
    let arch = instance_type
        .requirements
        .get(labels::ARCH)
        .and_then(|r| r.any())
        .map_or_else(|| labels::ARCH_AMD64.to_owned(), |a| a.into_owned());
    BTreeMap::from([
        (labels::HOSTNAME.to_owned(), node_name.to_owned()),
        (labels::INSTANCE_TYPE.to_owned(), instance_type.name.clone()),
        (labels::ZONE.to_owned(), zone.to_owned()),
        (labels::REGION.to_owned(), region.to_owned()),
        (labels::ARCH.to_owned(), arch),
        (labels::OS.to_owned(), labels::OS_LINUX.to_owned()),
    ])
}

/// What registration writes onto the claim's Node: the claim's labels with `karpenter.sh/registered`, and the
/// claim's annotations (the NodePool template's, such as `karpenter.sh/do-not-disrupt`, and the hashes), each
/// over what the Node already has (Karpenter's `syncNode`).
pub fn registered_metadata(
    claim: &NodeClaim,
) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut node_labels = claim.metadata.labels.clone().unwrap_or_default();
    node_labels.insert(labels::NODE_REGISTERED.into(), "true".into());
    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    (node_labels, annotations)
}
