//! Whether a running instance still matches its EC2NodeClass: the cloud-side drift checks (AMI, subnet,
//! security groups), judged from facts both providers report.

use std::collections::BTreeSet;

use super::instance::Instance;
use super::node_class::NodeClass;

/// Why an instance no longer matches its class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriftReason {
    /// Its AMI is not among the class's resolved AMIs.
    AmiDrift,
    /// Its subnet is not among the class's resolved subnets.
    SubnetDrift,
    /// Its security groups differ from the class's resolved ones.
    SecurityGroupDrift,
}

impl DriftReason {
    /// Karpenter's name for the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::AmiDrift => "AMIDrift",
            DriftReason::SubnetDrift => "SubnetDrift",
            DriftReason::SecurityGroupDrift => "SecurityGroupDrift",
        }
    }
}

/// The first way `instance` drifted from `class`, in Karpenter's order (AMI, subnet, security groups).
/// Facts the instance does not report (no subnet, no security groups) are not judged.
pub fn drift(instance: &Instance, class: &NodeClass) -> Option<DriftReason> {
    let resolved = &class.resolved;
    if !resolved.amis.iter().any(|ami| ami.id == instance.image_id) {
        return Some(DriftReason::AmiDrift);
    }
    if let Some(subnet) = &instance.subnet_id {
        if !resolved.subnets.iter().any(|s| s.subnet.id == *subnet) {
            return Some(DriftReason::SubnetDrift);
        }
    }
    if !instance.security_group_ids.is_empty() {
        let have: BTreeSet<&str> = instance
            .security_group_ids
            .iter()
            .map(String::as_str)
            .collect();
        let want: BTreeSet<&str> = resolved
            .security_groups
            .iter()
            .map(|g| g.id.as_str())
            .collect();
        if have != want {
            return Some(DriftReason::SecurityGroupDrift);
        }
    }
    None
}
