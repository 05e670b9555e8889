//! A static NodePool's numbers and the claim that stands for its template (the `StaticCapacity` feature gate):
//! what drift launches in place of a static node, and what the pool's `replicas` and node limit are. The decisions
//! that use them are the engine's (`engine::static_capacity`) and disruption's (static drift).

use super::{Choice, PlannedClaim, Template, NODES};
use crate::api::nodepool::NodePool;
use crate::catalog::{parse_quantity, Catalog, InstanceType, Resources};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// The claim drift launches in place of a drifted node of static pool `pool` (Karpenter's static drift): the
/// template alone, with the cheapest offering of `catalog` it allows as the likely launch. `None` when the pool's
/// requirements do not parse.
pub fn static_replacement(pool: &NodePool, catalog: &Catalog) -> Option<PlannedClaim> {
    let allocatable: Vec<Resources> = catalog
        .instance_types
        .iter()
        .map(InstanceType::allocatable)
        .collect();
    let template = Template::new(pool, catalog, &allocatable).ok()?;
    let cheapest = template
        .instance_types
        .first()
        .and_then(|&i| Choice::cheapest(&catalog.instance_types[i], &template.requirements));
    Some(PlannedClaim {
        nodepool: template.nodepool,
        requirements: template.requirements,
        instance_types: Default::default(),
        pods: Vec::new(),
        requests: Resources::default(),
        cheapest,
    })
}

/// The replicas and node limit of a static pool, or `None` for a dynamic one.
pub fn replicas_of(pool: &NodePool) -> Option<(u64, Option<u64>)> {
    let replicas = u64::try_from(pool.spec.replicas?).unwrap_or(0);
    let limit = pool
        .spec
        .limits
        .as_ref()
        .and_then(|l| l.get(NODES))
        .and_then(|q| match q {
            IntOrString::Int(n) => Some(i64::from(*n)),
            IntOrString::String(text) => parse_quantity(text).ok().map(|milli| milli / 1000),
        })
        .map(|n| u64::try_from(n).unwrap_or(0));
    Some((replicas, limit))
}
