//! A launched instance as controllers see it, and the `aws:///<zone>/<id>` provider IDs that name it.

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::error::CloudError;
use crate::api::ec2nodeclass::CapacityReservationType;
use crate::catalog::CapacityType;

/// An instance kerf launched.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    /// `i-0123456789abcdef0`.
    pub id: String,
    /// `aws:///us-west-2a/i-0123456789abcdef0`: the Node's `spec.providerID`.
    pub provider_id: String,
    pub instance_type: String,
    pub zone: String,
    pub capacity_type: CapacityType,
    pub image_id: String,
    pub launch_time: SystemTime,
    pub state: InstanceState,
    /// Drift-relevant facts: where it runs and with which security groups.
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation a `reserved` instance runs in; `None` for the other capacity types.
    pub reservation: Option<InstanceReservation>,
    /// The placement group it runs in, if any.
    pub placement: Option<InstancePlacement>,
}

/// The placement group an instance runs in (EC2's `Placement.GroupId` and `PartitionNumber`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstancePlacement {
    /// `pg-…`.
    pub group_id: String,
    /// The partition of a partition group, once known: EC2 picks one when the launch named none, and says which
    /// only when the instance is described.
    pub partition: Option<u32>,
}

/// The capacity reservation an instance was launched into: what its node's reservation labels say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceReservation {
    /// `cr-…`.
    pub id: String,
    pub reservation_type: CapacityReservationType,
    /// Whether EC2 may take the capacity back (an interruptible ODCR).
    pub interruptible: bool,
}

/// The EC2 lifecycle state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InstanceState {
    Pending,
    Running,
    Stopping,
    Stopped,
    ShuttingDown,
    Terminated,
}

impl InstanceState {
    /// Parses EC2's state name; `None` for a name EC2 does not use.
    pub fn from_ec2(name: &str) -> Option<Self> {
        Some(match name {
            "pending" => InstanceState::Pending,
            "running" => InstanceState::Running,
            "stopping" => InstanceState::Stopping,
            "stopped" => InstanceState::Stopped,
            "shutting-down" => InstanceState::ShuttingDown,
            "terminated" => InstanceState::Terminated,
            _ => return None,
        })
    }

    /// Shutting down or terminated: the instance is gone for kerf's purposes.
    pub fn is_gone(self) -> bool {
        matches!(
            self,
            InstanceState::ShuttingDown | InstanceState::Terminated
        )
    }
}

/// `aws:///<zone>/<id>`.
pub fn provider_id(zone: &str, instance_id: &str) -> String {
    format!("aws:///{zone}/{instance_id}")
}

/// The zone in a provider ID `aws:///<zone>/<id>`; `None` when it names none or is not of that form.
pub fn zone_of(provider_id: &str) -> Option<&str> {
    let (zone, _id) = provider_id.strip_prefix("aws:///")?.rsplit_once('/')?;
    (!zone.is_empty()).then_some(zone)
}

/// The instance ID in a provider ID `aws:///<zone>/<id>` (the zone may be empty, as some tools write it).
pub fn instance_id(provider_id: &str) -> Result<&str, CloudError> {
    let invalid = || {
        CloudError::InvalidRequest(format!(
            "provider ID {provider_id:?} is not of the form aws:///<zone>/<instance-id>"
        ))
    };
    let rest = provider_id.strip_prefix("aws:///").ok_or_else(invalid)?;
    let (_zone, id) = rest.rsplit_once('/').ok_or_else(invalid)?;
    let well_formed = id
        .strip_prefix("i-")
        .is_some_and(|hex| !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if well_formed {
        Ok(id)
    } else {
        Err(invalid())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_ids_round_trip() {
        let id = provider_id("us-west-2a", "i-0123abcd");
        assert_eq!(id, "aws:///us-west-2a/i-0123abcd");
        assert_eq!(instance_id(&id), Ok("i-0123abcd"));
        assert_eq!(instance_id("aws:////i-0abc"), Ok("i-0abc"));
        assert_eq!(zone_of(&id), Some("us-west-2a"));
        assert_eq!(zone_of("aws:////i-0abc"), None);
        assert_eq!(zone_of("i-0abc"), None);
    }

    #[test]
    fn malformed_provider_ids_are_refused() {
        for bad in [
            "",
            "i-0abc",
            "aws://us-west-2a/i-0abc",
            "kind://docker/x",
            "aws:///us-west-2a/",
            "aws:///us-west-2a/i-",
            "aws:///us-west-2a/i-xyz",
            "aws:///us-west-2a/vol-0abc",
            "aws:///us-west-2a/i-0abcé",
            "aws:///us-west-2a/ié0abc",
            "aws:///é/é",
            "aws:///🦀",
        ] {
            assert!(
                matches!(instance_id(bad), Err(CloudError::InvalidRequest(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn states_parse_and_gone_means_shutting_down_or_terminated() {
        assert_eq!(
            InstanceState::from_ec2("running"),
            Some(InstanceState::Running)
        );
        assert_eq!(InstanceState::from_ec2("exploded"), None);
        assert!(InstanceState::ShuttingDown.is_gone());
        assert!(InstanceState::Terminated.is_gone());
        assert!(!InstanceState::Stopped.is_gone());
    }
}
