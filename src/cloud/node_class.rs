//! An EC2NodeClass with what its selectors resolved to: the input of instance-type listing and launches,
//! and the facts drift is judged against.

use std::collections::HashMap;

use super::error::CloudError;
use crate::api::ec2nodeclass::{CapacityReservation, EC2NodeClassSpec, SecurityGroup, Subnet};

/// The reasons a class is not ready (the `reason` of [`CloudError::NodeClassNotReady`]).
pub const NO_SUBNETS: &str = "no subnet matches subnetSelectorTerms";
pub const NO_SECURITY_GROUPS: &str = "no security group matches securityGroupSelectorTerms";
pub const NO_AMIS: &str = "no AMI matches amiSelectorTerms";
/// The instance profile `spec.instanceProfile` names does not exist (the reason goes on with its name).
pub const NO_INSTANCE_PROFILE: &str = "no instance profile is named by spec.instanceProfile";
/// The IAM role `spec.role` names does not exist, so no instance profile can hold it (the reason goes on with
/// its name).
pub const NO_ROLE: &str = "no IAM role is named by spec.role";

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
}

/// A subnet with the free addresses that decide between subnets of one zone.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedSubnet {
    pub subnet: Subnet,
    pub available_ips: i64,
}

/// An AMI and the architecture it boots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedAmi {
    pub id: String,
    pub name: Option<String>,
    /// `x86_64` or `arm64`, as EC2 and the instance-type catalog spell it.
    pub architecture: String,
    /// RFC 3339, as EC2 reports it; the newest wins among AMIs of one architecture.
    pub creation_date: Option<String>,
}

impl ResolvedNodeClass {
    /// The AMI for instances of `architecture`.
    pub fn ami_for(&self, architecture: &str) -> Option<&ResolvedAmi> {
        self.amis
            .iter()
            .find(|ami| ami.architecture == architecture)
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

/// Keeps, per architecture, the newest AMI (by creation date, then ID for a stable choice), sorted by
/// architecture.
pub fn newest_per_architecture(amis: impl IntoIterator<Item = ResolvedAmi>) -> Vec<ResolvedAmi> {
    let mut newest: std::collections::BTreeMap<String, ResolvedAmi> = Default::default();
    for ami in amis {
        let replace = newest
            .get(&ami.architecture)
            .is_none_or(|kept| (&ami.creation_date, &ami.id) > (&kept.creation_date, &kept.id));
        if replace {
            newest.insert(ami.architecture.clone(), ami);
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
