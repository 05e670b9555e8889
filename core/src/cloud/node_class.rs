//! An EC2NodeClass with what its selectors resolved to: the input of instance-type listing and launches,
//! and the facts drift is judged against.

use std::collections::HashMap;

use super::error::CloudError;
use crate::api::ec2nodeclass::{CapacityReservation, EC2NodeClassSpec, SecurityGroup, Subnet};
use crate::api::labels;
use crate::api::requirements::Requirement;
use crate::catalog::InstanceType;
use crate::catalog::{kube_arch, INSTANCE_ACCELERATOR_COUNT, INSTANCE_GPU_COUNT};
use crate::catalog::{PLACEMENT_GROUP_ID, PLACEMENT_GROUP_PARTITION};

/// The reasons a class is not ready (the `reason` of [`CloudError::NodeClassNotReady`]).
pub const NO_SUBNETS: &str = "no subnet matches subnetSelectorTerms";
pub const NO_SECURITY_GROUPS: &str = "no security group matches securityGroupSelectorTerms";
pub const NO_AMIS: &str = "no AMI matches amiSelectorTerms";
/// An AMI alias the cluster's Kubernetes version does not support (the reason goes on with why).
pub const UNSUPPORTED_ALIAS: &str = "the AMI alias is not supported";
/// The instance profile `spec.instanceProfile` names does not exist (the reason goes on with its name).
pub const NO_INSTANCE_PROFILE: &str = "no instance profile is named by spec.instanceProfile";
/// The IAM role `spec.role` names does not exist, so no instance profile can hold it (the reason goes on with
/// its name).
pub const NO_ROLE: &str = "no IAM role is named by spec.role";
/// No available placement group has the name or ID `spec.placementGroupSelector` gives (the reason goes on with
/// Karpenter's message).
pub const NO_PLACEMENT_GROUP: &str = "no placement group matches spec.placementGroupSelector";
/// The placement group could not be looked up (the reason goes on with the cloud's error).
pub const PLACEMENT_GROUP_UNRESOLVED: &str = "the placement group could not be resolved";

/// An EC2NodeClass ready to launch from.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeClass {
    pub name: String,
    pub spec: EC2NodeClassSpec,
    pub resolved: ResolvedNodeClass,
}

impl NodeClass {
    /// The class `name` with what its selectors resolved to; [`CloudError::NodeClassNotReady`] when
    /// something it needs to launch matched nothing.
    pub fn ready(
        name: &str,
        spec: &EC2NodeClassSpec,
        resolved: ResolvedNodeClass,
    ) -> Result<NodeClass, CloudError> {
        if let Some(reason) = resolved.not_ready_reason() {
            return Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: reason.to_owned(),
            });
        }
        if let (Some(selector), None) = (&spec.placement_group_selector, &resolved.placement_group)
        {
            let named = selector.name.as_deref().or(selector.id.as_deref());
            return Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: format!(
                    "{NO_PLACEMENT_GROUP}: Placement group {:?} not found",
                    named.unwrap_or_default()
                ),
            });
        }
        Ok(NodeClass {
            name: name.to_owned(),
            spec: spec.clone(),
            resolved,
        })
    }
}

/// What the selector terms of an EC2NodeClass resolved to (Karpenter's `status.subnets`, `securityGroups`,
/// `amis`, `instanceProfile`, `capacityReservations`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResolvedNodeClass {
    pub subnets: Vec<ResolvedSubnet>,
    pub security_groups: Vec<SecurityGroup>,
    /// The newest matching AMI per architecture.
    pub amis: Vec<ResolvedAmi>,
    pub instance_profile: Option<String>,
    /// The active, unexpired capacity reservations `capacityReservationSelectorTerms` matched, sorted by ID (none
    /// matching is fine: the class launches on-demand and spot). `None` when they were not looked up: the
    /// `ReservedCapacity` feature gate is off, or the provider has no such thing (the in-memory cloud).
    pub capacity_reservations: Option<Vec<CapacityReservation>>,
    /// The available placement group `spec.placementGroupSelector` names; `None` without a selector (a class
    /// whose selector matches no group is not ready).
    pub placement_group: Option<PlacementGroup>,
}

/// A placement group instances of a class launch into (Karpenter's `placementgroup.PlacementGroup`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementGroup {
    /// `pg-…`: the `karpenter.k8s.aws/placement-group-id` label of nodes launched into it.
    pub id: String,
    pub name: String,
    pub strategy: PlacementStrategy,
    /// The partitions of a `partition` group (EC2 allows up to 7); 0 for the other strategies.
    pub partition_count: u32,
}

/// How EC2 places a group's instances; an instance type supports some of them (`PlacementGroupInfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementStrategy {
    Cluster,
    Partition,
    Spread,
}

impl PlacementStrategy {
    /// EC2's spelling: `cluster`, `partition`, `spread`.
    pub fn as_str(self) -> &'static str {
        match self {
            PlacementStrategy::Cluster => "cluster",
            PlacementStrategy::Partition => "partition",
            PlacementStrategy::Spread => "spread",
        }
    }

    /// The strategy EC2 spells `value`, if kerf knows it.
    pub fn parse(value: &str) -> Option<Self> {
        [Self::Cluster, Self::Partition, Self::Spread]
            .into_iter()
            .find(|s| s.as_str() == value)
    }
}

impl PlacementGroup {
    /// Adds to `it`'s requirements what instance types get from the group, so pods may select it and spread over
    /// its partitions (Karpenter's `InjectOfferings`): `placement-group-id In [id]`, and for a partition group
    /// `placement-group-partition In [1..=count]`.
    pub fn place(&self, it: &mut InstanceType) {
        it.requirements
            .add(Requirement::one_of(PLACEMENT_GROUP_ID, [self.id.as_str()]));
        if self.strategy == PlacementStrategy::Partition && self.partition_count > 0 {
            it.requirements.add(Requirement::one_of(
                PLACEMENT_GROUP_PARTITION,
                (1..=self.partition_count).map(|p| p.to_string()),
            ));
        }
    }

    /// Whether instances of a type that supports `strategies` (EC2's `PlacementGroupInfo`; `None` when unknown)
    /// may launch into the group (Karpenter's `placementGroupCompatibility`).
    pub fn admits(&self, strategies: Option<&[String]>) -> bool {
        strategies.is_none_or(|s| s.iter().any(|s| s == self.strategy.as_str()))
    }
}

/// A subnet with the free addresses that decide between subnets of one zone.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedSubnet {
    pub subnet: Subnet,
    pub available_ips: i64,
}

/// An AMI, the architecture it boots and, for an alias's image, the kinds of instance type it is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedAmi {
    pub id: String,
    pub name: Option<String>,
    /// `x86_64` or `arm64`, as EC2 and the instance-type catalog spell it.
    pub architecture: String,
    /// RFC 3339, as EC2 reports it; the newest wins among AMIs of one architecture.
    pub creation_date: Option<String>,
    /// The alias variants the image is published as (the AL2 GPU image is both NVIDIA's and Neuron's); empty
    /// for an image selected otherwise (ID, name, tags, SSM parameter), which fits every type of its
    /// architecture.
    pub variants: Vec<AmiVariant>,
    /// EC2 has deprecated the image (its deprecation time has passed): it is used only where no current image
    /// fits, as Karpenter prefers non-deprecated images whatever their age.
    pub deprecated: bool,
}

/// The variants of the EKS-optimized and Bottlerocket images an alias names, told apart by the instance types
/// they are for as Karpenter's `Variant.Requirements` does: standard images for types without GPUs or
/// accelerators, NVIDIA images for types with GPUs, Neuron images for types with accelerators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AmiVariant {
    Standard,
    Nvidia,
    Neuron,
}

impl AmiVariant {
    /// What a type must meet for the variant: `(label, exists)`: the label exists, or does not.
    pub fn requirements(self) -> &'static [(&'static str, bool)] {
        match self {
            AmiVariant::Standard => &[
                (INSTANCE_ACCELERATOR_COUNT, false),
                (INSTANCE_GPU_COUNT, false),
            ],
            AmiVariant::Nvidia => &[(INSTANCE_GPU_COUNT, true)],
            AmiVariant::Neuron => &[(INSTANCE_ACCELERATOR_COUNT, true)],
        }
    }

    /// Whether instances of `it` boot this variant: the type has the label (a GPU or accelerator count), or has
    /// not. A type whose requirements leave a label out has none of it.
    pub fn fits(self, it: &InstanceType) -> bool {
        let has = |key: &str| it.requirements.get(key).is_some_and(|r| !r.allows_absent());
        self.requirements()
            .iter()
            .all(|&(key, exists)| has(key) == exists)
    }
}

impl ResolvedAmi {
    /// The order images compete in, best last: current before deprecated, then newer, then the ID (Karpenter
    /// breaks ties by name; an ID is unique, so the choice is stable).
    fn rank(&self) -> (bool, &Option<String>, &String) {
        (!self.deprecated, &self.creation_date, &self.id)
    }

    /// Whether instances of `it` may boot this image: its architecture, and one of its variants if it has any.
    pub fn fits(&self, it: &InstanceType) -> bool {
        let arch = it.requirements.get(labels::ARCH).and_then(|r| r.any());
        arch.as_deref() == Some(kube_arch(&self.architecture))
            && (self.variants.is_empty() || self.variants.iter().any(|v| v.fits(it)))
    }
}

impl ResolvedNodeClass {
    /// The AMI instances of `it` boot: the newest of those that fit it (its architecture, and for an alias's
    /// images the variant for its GPUs or accelerators), as Karpenter maps AMIs to instance types.
    pub fn ami_for(&self, it: &InstanceType) -> Option<&ResolvedAmi> {
        self.amis
            .iter()
            .filter(|ami| ami.fits(it))
            .max_by(|a, b| a.rank().cmp(&b.rank()))
    }

    /// The subnet to launch into in `zone`: the one with the most free addresses (ties: the lowest ID).
    pub fn subnet_in(&self, zone: &str) -> Option<&ResolvedSubnet> {
        self.subnets
            .iter()
            .filter(|s| s.subnet.zone == zone)
            .min_by(|a, b| {
                b.available_ips
                    .cmp(&a.available_ips)
                    .then_with(|| a.subnet.id.cmp(&b.subnet.id))
            })
    }

    /// The zones of the subnets (where the class can launch), with their zone IDs where known.
    pub fn zone_ids(&self) -> HashMap<&str, Option<&String>> {
        self.subnets
            .iter()
            .map(|s| (s.subnet.zone.as_str(), s.subnet.zone_id.as_ref()))
            .collect()
    }

    /// The resolved reservation `id`, if the class selected it.
    pub fn capacity_reservation(&self, id: &str) -> Option<&CapacityReservation> {
        self.capacity_reservations
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|r| r.id == id)
    }

    /// Why nothing can be launched from this class, if so: one of [`NO_SUBNETS`], [`NO_SECURITY_GROUPS`],
    /// [`NO_AMIS`].
    pub fn not_ready_reason(&self) -> Option<&'static str> {
        if self.subnets.is_empty() {
            Some(NO_SUBNETS)
        } else if self.security_groups.is_empty() {
            Some(NO_SECURITY_GROUPS)
        } else if self.amis.is_empty() {
            Some(NO_AMIS)
        } else {
            None
        }
    }
}

/// Keeps, per architecture and variants, the best AMI (a current one before a deprecated one, then the newest by
/// creation date, then ID for a stable choice), sorted by architecture, then variants.
pub fn newest_per_architecture(amis: impl IntoIterator<Item = ResolvedAmi>) -> Vec<ResolvedAmi> {
    let mut newest: std::collections::BTreeMap<(String, Vec<AmiVariant>), ResolvedAmi> =
        Default::default();
    for ami in amis {
        let key = (ami.architecture.clone(), ami.variants.clone());
        let replace = newest.get(&key).is_none_or(|kept| ami.rank() > kept.rank());
        if replace {
            newest.insert(key, ami);
        }
    }
    newest.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ami(id: &str, architecture: &str, created: &str) -> ResolvedAmi {
        ResolvedAmi {
            id: id.into(),
            name: None,
            architecture: architecture.into(),
            creation_date: Some(created.into()),
            variants: Vec::new(),
            deprecated: false,
        }
    }

    fn subnet(id: &str, zone: &str, available_ips: i64) -> ResolvedSubnet {
        ResolvedSubnet {
            subnet: Subnet {
                id: id.into(),
                zone: zone.into(),
                zone_id: None,
            },
            available_ips,
        }
    }

    /// Upstream: amifamily `compareAMI` ("should prioritize the non-deprecated AMI over a newer deprecated
    /// one"): a deprecated image loses to any current one of its kind, newer or not, and is used only when it is
    /// all there is.
    #[test]
    fn a_current_image_wins_over_a_newer_deprecated_one() {
        let deprecated = |id: &str, created: &str| ResolvedAmi {
            deprecated: true,
            ..ami(id, "x86_64", created)
        };
        let kept = newest_per_architecture([
            deprecated("ami-new-deprecated", "2026-06-01"),
            ami("ami-old-current", "x86_64", "2025-01-01"),
        ]);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].id, "ami-old-current");
        let kept = newest_per_architecture([
            deprecated("ami-a", "2025-01-01"),
            deprecated("ami-b", "2026-01-01"),
        ]);
        assert_eq!(
            kept[0].id, "ami-b",
            "the newest deprecated one when all are"
        );
    }

    /// Upstream: amifamily's `Variant.Requirements` and `MapToInstanceTypes`: an alias's standard image boots
    /// types without GPUs or accelerators, its NVIDIA image GPU types, its Neuron image accelerator types; an
    /// image selected otherwise boots every type of its architecture; a type no image fits has none.
    #[test]
    fn alias_images_go_to_the_types_of_their_variant() {
        let catalog = crate::catalog::Catalog::from_instance_types_json(
            &serde_json::json!({"instanceTypes": [
                {"name": "plain", "cpu": "2", "memory": "4Gi", "pods": 10, "offerings": [{"zone": "z", "capacityType": "on-demand"}]},
                {"name": "gpu", "cpu": "8", "memory": "32Gi", "pods": 10, "offerings": [{"zone": "z", "capacityType": "on-demand"}],
                 "labels": {INSTANCE_GPU_COUNT: "1"}},
                {"name": "inf", "cpu": "8", "memory": "32Gi", "pods": 10, "offerings": [{"zone": "z", "capacityType": "on-demand"}],
                 "labels": {INSTANCE_ACCELERATOR_COUNT: "2"}},
                {"name": "arm", "cpu": "2", "memory": "4Gi", "pods": 10, "offerings": [{"zone": "z", "capacityType": "on-demand"}], "arch": "arm64"},
            ]})
            .to_string(),
        )
        .expect("a catalog");
        let of = |name: &str| {
            catalog
                .instance_types
                .iter()
                .find(|it| it.name == name)
                .expect("listed")
        };
        let with = |id: &str, created: &str, variants: &[AmiVariant]| ResolvedAmi {
            variants: variants.to_vec(),
            ..ami(id, "x86_64", created)
        };
        let class = |amis: Vec<ResolvedAmi>| ResolvedNodeClass {
            amis,
            ..ResolvedNodeClass::default()
        };
        let alias = class(vec![
            with("ami-standard", "2026-01-01", &[AmiVariant::Standard]),
            with("ami-nvidia", "2026-01-01", &[AmiVariant::Nvidia]),
            with("ami-neuron", "2026-01-01", &[AmiVariant::Neuron]),
        ]);
        let booted =
            |class: &ResolvedNodeClass, name: &str| class.ami_for(of(name)).map(|a| a.id.clone());
        assert_eq!(booted(&alias, "plain").as_deref(), Some("ami-standard"));
        assert_eq!(booted(&alias, "gpu").as_deref(), Some("ami-nvidia"));
        assert_eq!(booted(&alias, "inf").as_deref(), Some("ami-neuron"));
        assert_eq!(booted(&alias, "arm"), None);
        // Without an NVIDIA image, GPU types have no image (they would boot without drivers).
        let standard_only = class(vec![with(
            "ami-standard",
            "2026-01-01",
            &[AmiVariant::Standard],
        )]);
        assert_eq!(booted(&standard_only, "gpu"), None);
        // AL2's GPU image is NVIDIA's and Neuron's.
        let al2 = class(vec![with(
            "ami-gpu",
            "2026-01-01",
            &[AmiVariant::Nvidia, AmiVariant::Neuron],
        )]);
        assert_eq!(booted(&al2, "gpu").as_deref(), Some("ami-gpu"));
        assert_eq!(booted(&al2, "inf").as_deref(), Some("ami-gpu"));
        assert_eq!(booted(&al2, "plain"), None);
        // An image by ID fits every type of its architecture; the newest fitting one wins.
        let mixed = class(vec![
            with("ami-old", "2025-01-01", &[]),
            with("ami-standard", "2026-01-01", &[AmiVariant::Standard]),
        ]);
        assert_eq!(booted(&mixed, "plain").as_deref(), Some("ami-standard"));
        assert_eq!(booted(&mixed, "gpu").as_deref(), Some("ami-old"));
    }

    #[test]
    fn the_newest_ami_of_each_architecture_wins() {
        let kept = newest_per_architecture([
            ami("ami-1", "x86_64", "2025-01-01T00:00:00Z"),
            ami("ami-2", "x86_64", "2025-03-01T00:00:00Z"),
            ami("ami-3", "arm64", "2024-01-01T00:00:00Z"),
            ami("ami-4", "x86_64", "2025-02-01T00:00:00Z"),
        ]);
        let ids: Vec<_> = kept
            .iter()
            .map(|a| (a.architecture.as_str(), a.id.as_str()))
            .collect();
        assert_eq!(ids, [("arm64", "ami-3"), ("x86_64", "ami-2")]);
    }

    #[test]
    fn the_subnet_with_most_free_addresses_in_the_zone_is_chosen() {
        let class = ResolvedNodeClass {
            subnets: vec![
                subnet("subnet-a1", "us-west-2a", 100),
                subnet("subnet-a2", "us-west-2a", 4000),
                subnet("subnet-b1", "us-west-2b", 9000),
            ],
            ..Default::default()
        };
        assert_eq!(
            class.subnet_in("us-west-2a").unwrap().subnet.id,
            "subnet-a2"
        );
        assert!(class.subnet_in("us-west-2c").is_none());
    }

    #[test]
    fn readiness_needs_subnets_security_groups_and_amis() {
        let mut class = ResolvedNodeClass::default();
        assert!(class.not_ready_reason().unwrap().contains("subnet"));
        class.subnets.push(subnet("subnet-1", "us-west-2a", 1));
        assert!(class.not_ready_reason().unwrap().contains("security group"));
        class.security_groups.push(SecurityGroup {
            id: "sg-1".into(),
            name: None,
        });
        assert!(class.not_ready_reason().unwrap().contains("AMI"));
        class
            .amis
            .push(ami("ami-1", "x86_64", "2025-01-01T00:00:00Z"));
        assert_eq!(class.not_ready_reason(), None);
    }
}
