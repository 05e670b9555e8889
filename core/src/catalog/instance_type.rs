//! An instance type as the scheduler sees it: labels (as requirements), resources, and offerings.

use super::family::FamilyTraits;
use super::info::InstanceTypeInfo;
use super::offering::Offering;
use super::overhead::{capacity, overhead};
use super::resources::Resources;
use super::settings::CatalogSettings;
use super::well_known::ec2_requirements;
use crate::api::labels;
use crate::api::requirements::Requirements;

/// One instance type, ready for scheduling.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceType {
    /// `m5.large`.
    pub name: String,
    /// Every well-known label of the type, each as `key In [value]` (or `DoesNotExist` when the type has no
    /// value), with the zones and capacity types of its offerings.
    pub requirements: Requirements,
    /// What the node reports as capacity.
    pub capacity: Resources,
    /// What the node keeps from pods: kube-reserved + system-reserved + the hard eviction threshold.
    pub overhead: Resources,
    /// One per zone and capacity type.
    pub offerings: Vec<Offering>,
    /// What NodeOverlays changed of the type for the pools that see this entry.
    pub overlaid: Overlaid,
}

/// Which of a type's facts NodeOverlays changed: the claims that may launch it carry Karpenter's
/// `karpenter.sh/price-overlay-applied` / `capacity-overlay-applied` annotations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Overlaid {
    pub price: bool,
    pub capacity: bool,
}

impl InstanceType {
    /// Builds an EC2 instance type in `region` from its facts, the offerings the caller found for it, and
    /// the node settings (AMI family, kubelet, storage).
    pub fn from_info(
        info: &InstanceTypeInfo,
        region: &str,
        offerings: Vec<Offering>,
        settings: &CatalogSettings,
    ) -> Self {
        let traits = FamilyTraits::of(settings.ami_family);
        let capacity = capacity(info, settings, &traits);
        InstanceType {
            name: info.name.clone(),
            requirements: ec2_requirements(info, region, &offerings, &traits),
            overhead: overhead(info, settings, &traits, &capacity),
            capacity,
            offerings,
            overlaid: Overlaid::default(),
        }
    }

    /// Whether the type can satisfy `requirements`. The name is checked first, on its own: NodeClaims list
    /// hundreds of instance types, and passing over a type they leave out then costs one search instead of a
    /// lookup per shared key. (A type's requirements always pin its instance-type label to its name.)
    pub fn meets(&self, requirements: &Requirements) -> bool {
        requirements
            .get(labels::INSTANCE_TYPE)
            .is_none_or(|names| names.has(&self.name))
            && self.requirements.has_intersection(requirements)
    }

    /// What pods may use: capacity − overhead, for the resources the node has (overhead on a resource the
    /// node lacks, such as a reserved `pid` count, takes nothing away).
    pub fn allocatable(&self) -> Resources {
        let mut allocatable = self.capacity.clone() - &self.overhead;
        allocatable
            .extended
            .retain(|name, _| self.capacity.extended.contains_key(name));
        allocatable
    }
}
