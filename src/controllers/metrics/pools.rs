//! `karpenter_nodepools_usage` and `karpenter_nodepools_limit` (pkg/controllers/metrics/nodepool): each
//! NodePool's `status.resources` and `spec.limits` by resource.

use super::gauge_set::{labels, GaugeSet, Samples};
use super::resources::int_or_string_list;
use crate::api::nodepool::NodePool;
use prometheus_client::registry::Registry;
use std::sync::Arc;

pub struct PoolMetrics {
    pub usage: GaugeSet,
    pub limit: GaugeSet,
}

impl PoolMetrics {
    pub(super) fn register(registry: &mut Registry) -> PoolMetrics {
        let metrics = PoolMetrics {
            usage: GaugeSet::default(),
            limit: GaugeSet::default(),
        };
        registry.register(
            "karpenter_nodepools_usage",
            "Resources a NodePool's nodes have (its status.resources), by resource",
            metrics.usage.clone(),
        );
        registry.register(
            "karpenter_nodepools_limit",
            "A NodePool's limits (spec.limits), by resource",
            metrics.limit.clone(),
        );
        metrics
    }

    pub fn publish(&self, pools: &[Arc<NodePool>]) {
        let (usage, limit) = pool_samples(pools);
        self.usage.replace(usage);
        self.limit.replace(limit);
    }
}

/// The usage and limit samples of `pools`, labelled `resource_type` then `nodepool` as Karpenter declares them.
pub fn pool_samples(pools: &[Arc<NodePool>]) -> (Samples, Samples) {
    let mut usage = Vec::new();
    let mut limit = Vec::new();
    for pool in pools {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let resources = pool.status.as_ref().and_then(|s| s.resources.as_ref());
        let of = |values: Vec<(String, f64)>| {
            values
                .into_iter()
                .map(|(resource, value)| {
                    (
                        labels([("resource_type", resource.as_str()), ("nodepool", name)]),
                        value,
                    )
                })
                .collect::<Samples>()
        };
        usage.extend(of(int_or_string_list(resources)));
        limit.extend(of(int_or_string_list(pool.spec.limits.as_ref())));
    }
    (usage, limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_and_limits_per_resource() {
        let pool: NodePool = serde_json::from_value(json!({
            "metadata": {"name": "general"},
            "spec": {"limits": {"cpu": 100, "memory": "1000Gi"}, "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}}},
            "status": {"resources": {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "40Gi", "pods": "58"}},
        }))
        .expect("a NodePool");
        let (usage, limit) = pool_samples(&[Arc::new(pool)]);
        assert!(usage.contains(&(
            labels([("resource_type", "cpu"), ("nodepool", "general")]),
            4.0
        )));
        assert!(usage.contains(&(
            labels([
                ("resource_type", "ephemeral_storage"),
                ("nodepool", "general")
            ]),
            40.0 * 1_073_741_824.0
        )));
        assert_eq!(usage.len(), 4);
        assert_eq!(
            limit,
            vec![
                (
                    labels([("resource_type", "cpu"), ("nodepool", "general")]),
                    100.0
                ),
                (
                    labels([("resource_type", "memory"), ("nodepool", "general")]),
                    1000.0 * 1_073_741_824.0
                ),
            ]
        );
    }
}
