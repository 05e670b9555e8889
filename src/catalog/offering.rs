//! Offerings: where and how an instance type can be bought (zone × capacity type), at what price, and
//! whether it can be bought right now.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::api::labels;

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

/// A capacity reservation as an offering: which one, and how many more instances it takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// `cr-…`, the `karpenter.k8s.aws/capacity-reservation-id` label of nodes launched into it.
    pub id: String,
    /// The instances it can still take (EC2's `AvailableInstanceCount`).
    pub capacity: u32,
}
