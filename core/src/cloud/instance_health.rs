//! What EC2's status checks say of an instance (DescribeInstanceStatus): its instance and system reachability
//! checks, its attached EBS volumes' check, and the events scheduled for it. The cloud reports them as they are;
//! which of them make an instance unhealthy is [`crate::interruption::instance_status`]'s decision.

use std::time::SystemTime;

/// Which check a detail comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StatusCategory {
    /// The instance's own reachability (its OS, its network configuration).
    Instance,
    /// The host's (AWS's hardware, network, power).
    System,
    /// A scheduled event: reboot, maintenance, retirement, stop.
    Event,
    /// The attached EBS volumes'.
    Ebs,
}

impl StatusCategory {
    /// Karpenter's name of the category, the `category` label of its metric.
    pub fn as_str(self) -> &'static str {
        match self {
            StatusCategory::Instance => "InstanceStatus",
            StatusCategory::System => "SystemStatus",
            StatusCategory::Event => "EventStatus",
            StatusCategory::Ebs => "EBSStatus",
        }
    }
}

/// One detail of a check, or one scheduled event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusCheck {
    pub category: StatusCategory,
    /// The check's name (`reachability`) or the event's code (`instance-retirement`).
    pub name: String,
    /// The check failed; a scheduled event always counts as failed.
    pub failed: bool,
    /// Since when the check has failed (EC2's `ImpairedSince`), when it says.
    pub impaired_since: Option<SystemTime>,
}

/// The status checks of one instance that EC2 reports as impaired or with a scheduled event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceHealth {
    pub instance_id: String,
    pub checks: Vec<StatusCheck>,
}
