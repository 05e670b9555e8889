//! What a parsed message asks of the cluster: which NodeClaims to delete (or only tell about) with which
//! Event, and which offerings to keep out of launches. Pure: the claims come from a lookup passed in.

use std::fmt;

use super::message::{Kind, Message};
use crate::catalog::CapacityType;
use crate::cloud::OfferingKey;

/// The NodeClaim that runs an instance, as far as dispatch needs it. The instance type and zone are those
/// of its labels; `None` while unknown (then no offering is marked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimInfo {
    pub name: String,
    pub instance_type: Option<String>,
    pub zone: Option<String>,
}

/// The reason of the Event recorded on the NodeClaim and its Node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    SpotInterrupted,
    SpotRebalanceRecommendation,
    InstanceUnhealthy,
    InstanceStopping,
    InstanceTerminating,
    CapacityReservationInstanceInterrupted,
}

impl EventReason {
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::SpotInterrupted => "SpotInterrupted",
            EventReason::SpotRebalanceRecommendation => "SpotRebalanceRecommendation",
            EventReason::InstanceUnhealthy => "InstanceUnhealthy",
            EventReason::InstanceStopping => "InstanceStopping",
            EventReason::InstanceTerminating => "InstanceTerminating",
            EventReason::CapacityReservationInstanceInterrupted => {
                "CapacityReservationInstanceInterrupted"
            }
        }
    }

    /// The Event's message.
    pub fn message(self) -> &'static str {
        match self {
            EventReason::SpotInterrupted => "Spot interruption warning was triggered",
            EventReason::SpotRebalanceRecommendation => {
                "Spot rebalance recommendation was triggered"
            }
            EventReason::InstanceUnhealthy => "An unhealthy warning was triggered for the instance",
            EventReason::InstanceStopping => "Instance is stopping",
            EventReason::InstanceTerminating => "Instance is terminating",
            EventReason::CapacityReservationInstanceInterrupted => {
                "Capacity Reservation interruption warning was triggered"
            }
        }
    }

    /// The reason of a kind that concerns a claim; `None` for [`Kind::NoOp`].
    fn of(kind: Kind) -> Option<EventReason> {
        Some(match kind {
            Kind::SpotInterrupted => EventReason::SpotInterrupted,
            Kind::RebalanceRecommendation => EventReason::SpotRebalanceRecommendation,
            Kind::ScheduledChange
            | Kind::InstanceStatus
            | Kind::SystemStatus
            | Kind::EventStatus => EventReason::InstanceUnhealthy,
            Kind::InstanceStopped => EventReason::InstanceStopping,
            Kind::InstanceTerminated => EventReason::InstanceTerminating,
            Kind::CapacityReservationInterrupted => {
                EventReason::CapacityReservationInstanceInterrupted
            }
            Kind::NoOp => return None,
        })
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing to do for a message. Every action is idempotent, because a message whose handling failed is
/// received and dispatched again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Keep the offering out of launches for [`ICE_TTL`](crate::cloud::ICE_TTL). Comes before the claim's
    /// deletion, so that its replacement avoids the offering being reclaimed.
    MarkUnavailable(OfferingKey),
    /// Record `reason` as an Event on the claim (and its Node) and, when `delete`, delete the claim through
    /// the termination flow (its replacement is launched first): graceful, or when `forceful` with a termination
    /// timestamp of now (pods deleted rather than evicted, volumes not waited for: the instance is broken).
    Claim {
        name: String,
        instance_id: String,
        reason: EventReason,
        delete: bool,
        forceful: bool,
    },
}

/// The actions for `message`, for each of its instances that `claim_of` knows (a message about instances of
/// other clusters asks nothing). After they are carried out, the message is deleted.
pub fn dispatch(message: &Message, claim_of: impl Fn(&str) -> Option<ClaimInfo>) -> Vec<Action> {
    let Some(reason) = EventReason::of(message.kind) else {
        return vec![];
    };
    let mut actions = Vec::new();
    for instance_id in &message.instance_ids {
        let Some(claim) = claim_of(instance_id) else {
            continue;
        };
        if let Some(capacity_type) = reclaimed_capacity(message.kind) {
            if let (Some(instance_type), Some(zone)) = (&claim.instance_type, &claim.zone) {
                actions.push(Action::MarkUnavailable(OfferingKey {
                    capacity_type,
                    instance_type: instance_type.clone(),
                    zone: zone.clone(),
                }));
            }
        }
        actions.push(Action::Claim {
            name: claim.name,
            instance_id: instance_id.clone(),
            reason,
            // A rebalance recommendation is only a risk: Karpenter records it and leaves the node.
            delete: message.kind != Kind::RebalanceRecommendation,
            // A failed status check: the instance is broken, a graceful drain may never finish.
            forceful: matches!(message.kind, Kind::InstanceStatus | Kind::SystemStatus),
        });
    }
    actions
}

/// The capacity a kind says AWS is taking back, whose offering is therefore short.
fn reclaimed_capacity(kind: Kind) -> Option<CapacityType> {
    match kind {
        Kind::SpotInterrupted => Some(CapacityType::Spot),
        Kind::CapacityReservationInterrupted => Some(CapacityType::Reserved),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: Kind, ids: &[&str]) -> Message {
        Message {
            kind,
            instance_ids: ids.iter().map(|s| s.to_string()).collect(),
            time: None,
        }
    }

    /// i-1 runs claim `a` (m5.large in us-west-2a), i-2 runs `b` whose labels are not known yet.
    fn claims(instance_id: &str) -> Option<ClaimInfo> {
        match instance_id {
            "i-1" => Some(ClaimInfo {
                name: "a".into(),
                instance_type: Some("m5.large".into()),
                zone: Some("us-west-2a".into()),
            }),
            "i-2" => Some(ClaimInfo {
                name: "b".into(),
                instance_type: None,
                zone: None,
            }),
            _ => None,
        }
    }

    fn claim(name: &str, instance_id: &str, reason: EventReason, delete: bool) -> Action {
        Action::Claim {
            name: name.into(),
            instance_id: instance_id.into(),
            reason,
            delete,
            forceful: false,
        }
    }

    fn forceful(name: &str, instance_id: &str) -> Action {
        Action::Claim {
            name: name.into(),
            instance_id: instance_id.into(),
            reason: EventReason::InstanceUnhealthy,
            delete: true,
            forceful: true,
        }
    }

    fn offering(capacity_type: CapacityType) -> Action {
        Action::MarkUnavailable(OfferingKey {
            capacity_type,
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
        })
    }

    #[test]
    fn each_kind_deletes_the_claim_with_its_reason_and_marks_reclaimed_offerings_first() {
        use EventReason::*;
        for (kind, expected) in [
            (
                Kind::SpotInterrupted,
                vec![
                    offering(CapacityType::Spot),
                    claim("a", "i-1", SpotInterrupted, true),
                ],
            ),
            (
                Kind::RebalanceRecommendation,
                vec![claim("a", "i-1", SpotRebalanceRecommendation, false)],
            ),
            (
                Kind::ScheduledChange,
                vec![claim("a", "i-1", InstanceUnhealthy, true)],
            ),
            (
                Kind::InstanceStopped,
                vec![claim("a", "i-1", InstanceStopping, true)],
            ),
            (
                Kind::InstanceTerminated,
                vec![claim("a", "i-1", InstanceTerminating, true)],
            ),
            (
                Kind::CapacityReservationInterrupted,
                vec![
                    offering(CapacityType::Reserved),
                    claim("a", "i-1", CapacityReservationInstanceInterrupted, true),
                ],
            ),
            // Karpenter's actionForMessage: failed status checks terminate forcefully, a scheduled event
            // drains.
            (Kind::InstanceStatus, vec![forceful("a", "i-1")]),
            (Kind::SystemStatus, vec![forceful("a", "i-1")]),
            (
                Kind::EventStatus,
                vec![claim("a", "i-1", InstanceUnhealthy, true)],
            ),
            (Kind::NoOp, vec![]),
        ] {
            assert_eq!(
                dispatch(&message(kind, &["i-1"]), claims),
                expected,
                "{kind}"
            );
        }
    }

    #[test]
    fn instances_of_no_claim_ask_nothing_and_unknown_labels_mark_nothing() {
        assert_eq!(
            dispatch(&message(Kind::SpotInterrupted, &["i-9"]), claims),
            []
        );
        assert_eq!(
            dispatch(&message(Kind::SpotInterrupted, &["i-2", "i-9"]), claims),
            [claim("b", "i-2", EventReason::SpotInterrupted, true)]
        );
    }

    #[test]
    fn a_health_event_about_several_instances_acts_on_each_claim() {
        assert_eq!(
            dispatch(
                &message(Kind::ScheduledChange, &["i-1", "i-9", "i-2"]),
                claims
            ),
            [
                claim("a", "i-1", EventReason::InstanceUnhealthy, true),
                claim("b", "i-2", EventReason::InstanceUnhealthy, true),
            ]
        );
    }

    #[test]
    fn reasons_read_as_karpenters_event_reasons() {
        assert_eq!(
            EventReason::CapacityReservationInstanceInterrupted.to_string(),
            "CapacityReservationInstanceInterrupted"
        );
        assert_eq!(EventReason::InstanceUnhealthy.as_str(), "InstanceUnhealthy");
        assert!(!EventReason::SpotInterrupted.message().is_empty());
    }
}
