//! What a launch asks for and how it is carried out on EC2's terms, decided purely: the request built from
//! a NodeClaim, and the plan (capacity type and one override per instance type × zone) both providers
//! follow. See controller-behaviour.md §2.1–2.3.

use std::borrow::Cow;
use std::cmp::{Ordering, Reverse};
use std::collections::BTreeMap;
use std::time::SystemTime;

use super::error::CloudError;
use super::ice::{IceCache, OfferingKey};
use super::instance::InstancePlacement;
use super::node_class::{NodeClass, PlacementStrategy};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::Taint;
use crate::api::requirements::{Requirement, Requirements};
use crate::catalog::{CapacityType, InstanceType, OfferingFilter, EFA, PLACEMENT_GROUP_PARTITION};

/// EC2 takes at most this many instance types in one CreateFleet call (Karpenter truncates to it).
pub const MAX_INSTANCE_TYPES: usize = 60;

pub use crate::api::well_known::{
    TAG_CLUSTER_PREFIX, TAG_EC2NODECLASS, TAG_EKS_CLUSTER_NAME, TAG_NODECLAIM, TAG_NODEPOOL,
    UNREGISTERED_TAINT_KEY,
};

/// One instance to launch for a NodeClaim.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchRequest<'a> {
    pub node_claim: String,
    pub node_pool: String,
    pub node_class: NodeClass,
    /// The instance types the claim allows that have an offering it allows, cheapest first: borrowed from the
    /// catalog (a claim may allow hundreds of types, and several launch at once).
    pub instance_types: Vec<Cow<'a, InstanceType>>,
    /// The claim's requirements (zones, capacity types, instance types, …).
    pub requirements: Requirements,
    /// The labels the node registers with: the claim's labels and every single-valued requirement.
    pub labels: BTreeMap<String, String>,
    /// The taints the node registers with: the claim's taints and startup taints.
    pub taints: Vec<Taint>,
    /// The claim requests `vpc.amazonaws.com/efa`: where its class lists no network interfaces, the instance
    /// gets one EFA interface per network card its type has, as Karpenter launches such claims.
    pub efa_requested: bool,
}

impl<'a> LaunchRequest<'a> {
    /// The same request owning its instance types, free of the catalog it borrowed them from (a request kept
    /// past its catalog, or changed by a test).
    pub fn into_owned(self) -> LaunchRequest<'static> {
        LaunchRequest {
            instance_types: self
                .instance_types
                .into_iter()
                .map(|t| Cow::Owned(t.into_owned()))
                .collect(),
            node_claim: self.node_claim,
            node_pool: self.node_pool,
            node_class: self.node_class,
            requirements: self.requirements,
            labels: self.labels,
            taints: self.taints,
            efa_requested: self.efa_requested,
        }
    }

    /// The request for `claim`, choosing among `instance_types` (with their offerings, as
    /// [`CloudProvider::instance_types`](super::CloudProvider::instance_types) gives them).
    pub fn from_node_claim(
        claim: &NodeClaim,
        node_class: NodeClass,
        instance_types: &'a [InstanceType],
    ) -> Result<Self, CloudError> {
        let name = claim.metadata.name.clone().ok_or_else(|| {
            CloudError::InvalidRequest("the NodeClaim has no metadata.name".into())
        })?;
        let requirements = claim
            .spec
            .requirements
            .iter()
            .map(|r| {
                let min_values = r.min_values.and_then(|v| usize::try_from(v).ok());
                Requirement::new(
                    r.key.as_str(),
                    r.operator,
                    r.values.iter().flatten().map(String::as_str),
                    min_values,
                )
            })
            .collect::<Result<Requirements, _>>()
            .map_err(|e| {
                CloudError::InvalidRequest(format!("NodeClaim {name} requirements: {e}"))
            })?;
        let mut labels = claim.metadata.labels.clone().unwrap_or_default();
        labels.extend(requirements.labels());
        let node_pool = labels.get(labels::NODEPOOL).cloned().unwrap_or_default();
        let taints = claim
            .spec
            .taints
            .iter()
            .chain(&claim.spec.startup_taints)
            .flatten()
            .cloned()
            .collect();
        let mut compatible: Vec<(Option<f64>, &InstanceType)> = instance_types
            .iter()
            .filter(|it| it.meets(&requirements))
            .filter_map(|it| {
                let filter = OfferingFilter::new(&requirements);
                let offerings = it.offerings.iter().filter(|o| filter.allows(o));
                let cheapest = offerings.map(|o| o.price).min_by(|a, b| by_price(*a, *b))?;
                Some((cheapest, it))
            })
            .collect();
        compatible.sort_by(|(a, x), (b, y)| by_price(*a, *b).then_with(|| x.name.cmp(&y.name)));
        let efa_requested = claim
            .spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .is_some_and(|r| r.contains_key(EFA));
        Ok(LaunchRequest {
            efa_requested,
            node_claim: name,
            node_pool,
            node_class,
            instance_types: compatible
                .into_iter()
                .map(|(_, it)| Cow::Borrowed(it))
                .collect(),
            requirements,
            labels,
            taints,
        })
    }

    /// The tags of the instance, its volumes and the fleet: the EC2NodeClass's tags, then kerf's own
    /// (which win).
    pub fn tags(&self, cluster_name: &str) -> BTreeMap<String, String> {
        let mut tags = self.node_class.spec.tags.clone().unwrap_or_default();
        tags.insert(
            format!("{TAG_CLUSTER_PREFIX}{cluster_name}"),
            "owned".into(),
        );
        tags.insert(TAG_EKS_CLUSTER_NAME.into(), cluster_name.into());
        tags.insert(TAG_NODEPOOL.into(), self.node_pool.clone());
        tags.insert(TAG_NODECLAIM.into(), self.node_claim.clone());
        tags.insert(TAG_EC2NODECLASS.into(), self.node_class.name.clone());
        tags
    }

    /// Where the instance goes: the class's placement group, and for a partition group the partition the claim
    /// requires, the lowest where it allows several (EC2 takes one; Karpenter picks the lowest, and a partition
    /// out of capacity is then left to the next claim). No partition when the claim names none: EC2 picks.
    pub fn placement(&self) -> Option<InstancePlacement> {
        let group = self.node_class.resolved.placement_group.as_ref()?;
        let partition = (group.strategy == PlacementStrategy::Partition)
            .then(|| self.requirements.get(PLACEMENT_GROUP_PARTITION)?.values())
            .flatten()
            .and_then(|values| values.iter().filter_map(|v| v.parse::<u32>().ok()).min());
        Some(InstancePlacement {
            group_id: group.id.clone(),
            partition,
        })
    }
}

/// How to launch a request: one capacity type, and the (type, zone) pools to try, cheapest first. A `reserved`
/// plan has one pool per (type, zone), each naming the reservation it launches into.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    pub capacity_type: CapacityType,
    pub overrides: Vec<LaunchOverride>,
    /// A NodeOverlay priced some of the types: EC2 must follow the overrides' priorities (the overlaid prices)
    /// rather than its own prices, as Karpenter's AWS provider launches such claims (`prioritized` on-demand,
    /// `capacity-optimized-prioritized` spot).
    pub prioritized: bool,
}

/// One pool CreateFleet may launch from.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchOverride {
    pub instance_type: String,
    pub zone: String,
    pub subnet_id: String,
    pub image_id: String,
    pub price: Option<f64>,
    /// The capacity reservation (`cr-…`) of a `reserved` pool; `None` for on-demand and spot.
    pub reservation_id: Option<String>,
}

impl LaunchOverride {
    pub fn key(&self, capacity_type: CapacityType) -> OfferingKey {
        OfferingKey {
            capacity_type,
            instance_type: self.instance_type.clone(),
            zone: self.zone.clone(),
        }
    }
}

/// Plans the launch of `request` at `now`: offerings must be allowed by the request, available, not in
/// `ice`, in a zone with a subnet, of a type with an AMI for its architecture. As Karpenter chooses, reserved
/// capacity comes first when allowed and offered, then spot (dropping spot pools pricier than the cheapest
/// on-demand one), then on-demand. At most [`MAX_INSTANCE_TYPES`] types, the cheapest. Nothing left is
/// insufficient capacity.
pub fn plan(
    request: &LaunchRequest,
    ice: &IceCache,
    now: SystemTime,
) -> Result<LaunchPlan, CloudError> {
    let class = &request.node_class.resolved;
    let mut pools: Vec<(CapacityType, LaunchOverride)> = Vec::new();
    // Per (type, zone): the rank of the reservation kept (room, then lowest ID) and its pool's index.
    let mut reserved: BTreeMap<(String, String), (ReservationRank, usize)> = BTreeMap::new();
    let filter = OfferingFilter::new(&request.requirements);
    for it in &request.instance_types {
        let Some(ami) = class.ami_for(it) else {
            continue;
        };
        for offering in &it.offerings {
            if !filter.allows(offering) {
                continue;
            }
            let key = OfferingKey {
                capacity_type: offering.capacity_type,
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
            };
            let Some(subnet) = class.subnet_in(&offering.zone) else {
                continue;
            };
            if ice.is_unavailable(&key, now) {
                continue;
            }
            let pool = LaunchOverride {
                instance_type: it.name.clone(),
                zone: offering.zone.clone(),
                subnet_id: subnet.subnet.id.clone(),
                image_id: ami.id.clone(),
                price: offering.price,
                reservation_id: offering.reservation.as_ref().map(|r| r.id.clone()),
            };
            if let Some(reservation) = &offering.reservation {
                // CreateFleet takes one override per pool: of several reservations of a type in a zone, the one
                // with the most room (then the lowest ID) is kept, as Karpenter's reserved offering filter does.
                let slot = (it.name.clone(), offering.zone.clone());
                let rank = (reservation.capacity, Reverse(reservation.id.clone()));
                match reserved.get(&slot) {
                    Some((kept, _)) if *kept >= rank => {}
                    Some(&(_, index)) => {
                        pools[index].1 = pool;
                        reserved.insert(slot, (rank, index));
                    }
                    None => {
                        reserved.insert(slot, (rank, pools.len()));
                        pools.push((offering.capacity_type, pool));
                    }
                }
                continue;
            }
            pools.push((offering.capacity_type, pool));
        }
    }
    let cheapest_on_demand = pools
        .iter()
        .filter(|(ct, _)| *ct == CapacityType::OnDemand)
        .filter_map(|(_, o)| o.price)
        .min_by(f64::total_cmp);
    let spot_worth_it = |o: &LaunchOverride| match (o.price, cheapest_on_demand) {
        (Some(spot), Some(on_demand)) => spot <= on_demand,
        _ => true,
    };
    let capacity_type = if pools.iter().any(|(ct, _)| *ct == CapacityType::Reserved) {
        CapacityType::Reserved
    } else if pools
        .iter()
        .any(|(ct, o)| *ct == CapacityType::Spot && spot_worth_it(o))
    {
        CapacityType::Spot
    } else if pools.iter().any(|(ct, _)| *ct == CapacityType::OnDemand) {
        CapacityType::OnDemand
    } else {
        return Err(CloudError::InsufficientCapacity { offerings: vec![] });
    };
    let mut overrides: Vec<LaunchOverride> = pools
        .into_iter()
        .filter(|(ct, o)| *ct == capacity_type && (*ct != CapacityType::Spot || spot_worth_it(o)))
        .map(|(_, o)| o)
        .collect();
    // Stable: within one price, the request's order (cheapest type first), then zone order.
    overrides.sort_by(|a, b| by_price(a.price, b.price));
    let mut kept_types: Vec<&str> = Vec::new();
    for o in &overrides {
        if !kept_types.contains(&o.instance_type.as_str()) && kept_types.len() < MAX_INSTANCE_TYPES
        {
            kept_types.push(&o.instance_type);
        }
    }
    let kept_types: Vec<String> = kept_types.into_iter().map(str::to_owned).collect();
    overrides.retain(|o| kept_types.contains(&o.instance_type));
    Ok(LaunchPlan {
        capacity_type,
        overrides,
        prioritized: request.instance_types.iter().any(|t| t.overlaid.price),
    })
}

/// How a reservation ranks among those of one type in one zone: the most room first, then the lowest ID.
type ReservationRank = (u32, Reverse<String>);

/// Known prices first, cheapest first.
fn by_price(a: Option<f64>, b: Option<f64>) -> Ordering {
    a.unwrap_or(f64::INFINITY)
        .total_cmp(&b.unwrap_or(f64::INFINITY))
}
