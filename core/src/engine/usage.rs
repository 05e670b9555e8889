//! What each NodePool uses (controller-behaviour.md §1.5, api-rules `status.resources`): the summed capacity of
//! its NodeClaims, in flight included, and how many there are. A claim counts its capacity once launched
//! (`status.capacity`); before that it counts as a node only, and the solve accounts for its size itself.

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::Resources;
use crate::scheduling::{pool_limits, NODES};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::collections::BTreeMap;

/// One pool's usage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub resources: Resources,
    pub nodes: i64,
}

/// The usage of every pool that has claims, by pool name.
pub fn by_pool<'a>(claims: impl IntoIterator<Item = &'a NodeClaim>) -> BTreeMap<String, Usage> {
    let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
    for claim in claims {
        let Some(pool) = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
        else {
            continue;
        };
        let entry = usage.entry(pool.clone()).or_default();
        entry.nodes += 1;
        if let Some(capacity) = claim.status.as_ref().and_then(|s| s.capacity.as_ref()) {
            // kerf writes the capacity itself; an amount that does not parse adds nothing.
            let parsed = Resources::from_quantities(capacity.iter().map(|(k, v)| (k, text(v))));
            if let Ok(capacity) = parsed {
                entry.resources += &capacity;
            }
        }
    }
    usage
}

fn text(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// The first of `pool`'s limits its usage is strictly above (`cpu`, `memory`, `nodes`…): the pool then creates
/// no NodeClaim until usage drops. A pool exactly at a limit may still create one; the solve has already
/// dropped every type that would not fit.
pub fn over_limit(pool: &NodePool, usage: &Usage) -> Option<String> {
    let mut left = pool_limits(pool)?;
    if usage.nodes == 0 {
        return None;
    }
    // `consume` takes one node and the given resources: the summed capacity with the first node, then the
    // other nodes with nothing.
    left.consume(&usage.resources);
    for _ in 1..usage.nodes {
        left.consume(&Resources::default());
    }
    left.overdrawn().map(str::to_owned)
}

/// `status.resources` for `usage`: the capacity as quantities, and `nodes` counted.
pub fn status_resources(usage: &Usage) -> BTreeMap<String, IntOrString> {
    let mut resources: BTreeMap<String, IntOrString> = usage
        .resources
        .to_quantities()
        .into_iter()
        .map(|(name, amount)| (name, IntOrString::String(amount)))
        .collect();
    resources.insert(
        NODES.to_owned(),
        IntOrString::String(usage.nodes.to_string()),
    );
    resources
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(pool: &str, capacity: Option<serde_json::Value>) -> NodeClaim {
        let mut value = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "labels": {"karpenter.sh/nodepool": pool}},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}}
        });
        if let Some(capacity) = capacity {
            value["status"] = json!({"capacity": capacity});
        }
        serde_json::from_value(value).expect("a valid NodeClaim")
    }

    fn pool(limits: serde_json::Value) -> NodePool {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "general"},
            "spec": {"limits": limits, "template": {"spec": {"requirements": [],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"}}}}
        }))
        .expect("a valid NodePool")
    }

    #[test]
    fn usage_sums_launched_capacity_and_counts_every_claim() {
        let claims = [
            claim(
                "general",
                Some(json!({"cpu": "2", "memory": "4Gi", "pods": 29})),
            ),
            claim(
                "general",
                Some(json!({"cpu": "4", "memory": "8Gi", "pods": "58"})),
            ),
            claim("general", None),
            claim("other", Some(json!({"cpu": "1"}))),
        ];
        let usage = by_pool(&claims);
        let general = &usage["general"];
        assert_eq!(general.nodes, 3);
        assert_eq!(general.resources.cpu, 6_000);
        assert_eq!(general.resources.memory, 12 << 30);
        assert_eq!(general.resources.pods, 87);
        assert_eq!(usage["other"].nodes, 1);
        assert_eq!(
            status_resources(general),
            BTreeMap::from([
                ("cpu".to_owned(), IntOrString::String("6".into())),
                ("memory".to_owned(), IntOrString::String("12Gi".into())),
                ("pods".to_owned(), IntOrString::String("87".into())),
                ("nodes".to_owned(), IntOrString::String("3".into())),
            ])
        );
    }

    #[test]
    fn only_usage_strictly_above_a_limit_stops_creation() {
        let usage = |cpu: &str, nodes| Usage {
            resources: Resources::from_quantities([("cpu", cpu)]).expect("a quantity"),
            nodes,
        };
        let limited = pool(json!({"cpu": "4", "nodes": 2}));
        assert_eq!(over_limit(&limited, &usage("4", 2)), None);
        assert_eq!(over_limit(&limited, &usage("5", 2)).as_deref(), Some("cpu"));
        assert_eq!(
            over_limit(&limited, &usage("2", 3)).as_deref(),
            Some("nodes")
        );
        assert_eq!(over_limit(&limited, &Usage::default()), None);
        assert_eq!(over_limit(&pool(json!(null)), &usage("100", 50)), None);
    }
}
