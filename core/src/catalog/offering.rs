//! Offerings: where and how an instance type can be bought (zone × capacity type), at what price, and
//! whether it can be bought right now.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::api::ec2nodeclass::CapacityReservationType;
use crate::api::labels;
use crate::api::requirements::{Requirement, Requirements};

use crate::api::labels::{
    CAPACITY_RESERVATION_ID, CAPACITY_RESERVATION_INTERRUPTIBLE, CAPACITY_RESERVATION_TYPE,
};

/// The purchase option, with the values of the `karpenter.sh/capacity-type` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum CapacityType {
    #[serde(rename = "on-demand")]
    OnDemand,
    #[serde(rename = "spot")]
    Spot,
    #[serde(rename = "reserved")]
    Reserved,
}

impl CapacityType {
    /// The label value: `on-demand`, `spot` or `reserved`.
    pub fn as_str(self) -> &'static str {
        match self {
            CapacityType::OnDemand => labels::CAPACITY_TYPE_ON_DEMAND,
            CapacityType::Spot => labels::CAPACITY_TYPE_SPOT,
            CapacityType::Reserved => labels::CAPACITY_TYPE_RESERVED,
        }
    }
}

impl fmt::Display for CapacityType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CapacityType {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            labels::CAPACITY_TYPE_ON_DEMAND => Ok(CapacityType::OnDemand),
            labels::CAPACITY_TYPE_SPOT => Ok(CapacityType::Spot),
            labels::CAPACITY_TYPE_RESERVED => Ok(CapacityType::Reserved),
            other => Err(format!(
                "unknown capacity type {other:?}; use on-demand, spot or reserved"
            )),
        }
    }
}

/// One way to buy an instance type: a zone and a capacity type, its price and whether it is available.
#[derive(Clone, Debug, PartialEq)]
pub struct Offering {
    /// The availability zone, e.g. `us-east-1a`.
    pub zone: String,
    /// The zone id (`use1-az1`). Zone names map to different ids in different accounts, so the embedded
    /// catalog leaves this unset; it comes from the EC2NodeClass's resolved subnets at run time.
    pub zone_id: Option<String>,
    pub capacity_type: CapacityType,
    /// USD per hour, or `None` when no price is known: kerf never guesses one.
    pub price: Option<f64>,
    /// Whether a launch may use it; cleared while EC2 reports insufficient capacity.
    pub available: bool,
    /// The capacity reservation a `reserved` offering launches into; `None` for the other capacity types.
    pub reservation: Option<Reservation>,
}

/// A capacity reservation as an offering: which one, of what kind, and how many more instances it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// `cr-…`, the `karpenter.k8s.aws/capacity-reservation-id` label of nodes launched into it.
    pub id: String,
    /// The instances it can still take (EC2's `AvailableInstanceCount`).
    pub capacity: u32,
    /// `karpenter.k8s.aws/capacity-reservation-type`: an on-demand reservation or a capacity block.
    pub reservation_type: CapacityReservationType,
    /// `karpenter.k8s.aws/capacity-reservation-interruptible`: whether EC2 may take the capacity back.
    pub interruptible: bool,
}

impl Reservation {
    /// The `karpenter.k8s.aws/capacity-reservation-interruptible` value: `"true"` or `"false"`.
    pub fn interruptible_label(&self) -> &'static str {
        if self.interruptible {
            "true"
        } else {
            "false"
        }
    }
}

/// Which offerings a set of requirements allows. An offering is a point in zone × capacity type, and a
/// reserved one also carries its reservation's id, type and interruptibility (Karpenter's AWS provider puts
/// the three reservation keys on reserved offerings and `DoesNotExist` on the others, so a pod asking for
/// `capacity-reservation-type: capacity-block` rules out on-demand and spot). The requirements are looked up
/// once for all the offerings of a type: pod advice walks every offering of every type of every pool.
pub struct OfferingFilter<'r> {
    zone: Option<&'r Requirement>,
    capacity_type: Option<&'r Requirement>,
    reservation: [Option<&'r Requirement>; 3],
}

impl<'r> OfferingFilter<'r> {
    pub fn new(requirements: &'r Requirements) -> Self {
        OfferingFilter {
            zone: requirements.get(labels::ZONE),
            capacity_type: requirements.get(labels::CAPACITY_TYPE),
            reservation: [
                CAPACITY_RESERVATION_ID,
                CAPACITY_RESERVATION_TYPE,
                CAPACITY_RESERVATION_INTERRUPTIBLE,
            ]
            .map(|key| requirements.get(key)),
        }
    }

    /// Whether the requirements leave room for an offering without a reservation (on-demand, spot).
    pub fn allows_unreserved(&self) -> bool {
        self.reservation.iter().flatten().all(|r| r.allows_absent())
    }

    /// Whether the requirements allow buying `offering`: available, in an allowed zone and capacity type, and
    /// with an allowed reservation (or none, where the requirements allow its keys to be absent).
    pub fn allows(&self, offering: &Offering) -> bool {
        offering.available && self.matches(offering)
    }

    /// Whether the requirements admit `offering`'s zone, capacity type and reservation, available or not (what
    /// a NodeOverlay selects).
    pub fn matches(&self, offering: &Offering) -> bool {
        self.zone.is_none_or(|zone| zone.has(&offering.zone))
            && self
                .capacity_type
                .is_none_or(|ct| ct.has(offering.capacity_type.as_str()))
            && match &offering.reservation {
                None => self.allows_unreserved(),
                Some(reservation) => {
                    let values = [
                        reservation.id.as_str(),
                        reservation.reservation_type.as_str(),
                        reservation.interruptible_label(),
                    ];
                    self.reservation
                        .iter()
                        .zip(values)
                        .all(|(r, value)| r.is_none_or(|r| r.has(value)))
                }
            }
    }
}
