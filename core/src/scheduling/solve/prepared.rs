//! NodePools prepared against a catalog, once for any number of solves.

use super::*;
use crate::api::nodepool::NodePoolSpec;

/// What of a NodePool a preparation depends on: its name, whether it is being deleted, and its spec. Callers
/// that keep a preparation from one decision to the next compare these to know whether it still holds.
pub type PoolKey = (Option<String>, bool, NodePoolSpec);

impl Prepared {
    /// `pool`'s [`PoolKey`].
    pub fn pool_key(pool: &NodePool) -> PoolKey {
        (
            pool.metadata.name.clone(),
            pool.metadata.deletion_timestamp.is_some(),
            pool.spec.clone(),
        )
    }

    /// Prepares `nodepools` (static and deleting pools dropped, weight order) over `catalog`; every node runs
    /// the `daemonsets` that tolerate and match it.
    pub fn new(nodepools: &[NodePool], catalog: &Catalog, daemonsets: &[DaemonSetPod]) -> Self {
        let allocatable: Vec<Resources> = catalog
            .instance_types
            .iter()
            .map(|it| it.allocatable())
            .collect();
        let mut pools: Vec<&NodePool> = nodepools
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && p.spec.replicas.is_none())
            .collect();
        // Weight descending (absent = 0), ties by name in reverse lexical order, as Karpenter orders them.
        pools.sort_by_key(|p| {
            (
                Reverse(p.spec.weight.unwrap_or(0)),
                Reverse(p.metadata.name.clone()),
            )
        });
        let templates: Vec<Template> = pools
            .iter()
            .filter_map(|p| Template::new(p, catalog, &allocatable).ok())
            .collect();
        let domains = templates
            .iter()
            .map(|t| offering_domains(catalog, t, &t.instance_types))
            .collect();
        let soft_taints = templates.iter().any(|t| {
            t.taints
                .iter()
                .any(|taint| taint.effect == TaintEffect::PreferNoSchedule)
        });
        let allow = AllowUndefined::from_keys(
            labels::well_known_labels()
                .iter()
                .map(String::as_str)
                .chain(catalog.label_keys()),
        );
        let daemons = templates
            .iter()
            .map(|t| DaemonGroups::new(t, daemonsets, catalog, &allocatable, &allow))
            .collect();
        Prepared {
            templates,
            domains,
            soft_taints,
            daemonsets: daemonsets.to_vec(),
            daemons,
            offering_bits: OfferingBits::new(catalog),
            reservations: Reservations::new(catalog),
            allow,
            names: catalog
                .instance_types
                .iter()
                .map(|it| TypeName::new(&it.name))
                .collect(),
        }
    }
}
