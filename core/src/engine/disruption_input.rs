//! The disruption engine's view of each node ([`NodeInput`]), assembled one way for both drivers: the controller
//! from its watch caches, the simulator from its run. A node is a NodeClaim of a NodePool with its Node (once
//! registered) and the pods bound to that Node; it is queued while its Node carries `karpenter.sh/disrupted`
//! (a command or a termination holds it), and nominated while a nomination covers its Node or claim name.

use super::nominations::Nominations;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::disruption::{
    count_nodes, CloudDrift, NodeInput, NodeState, PoolCounts, DISRUPTED_TAINT,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// What a driver knows of a claim that the objects do not say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// How its EC2NodeClass's resolution changed since launch (the controller asks the cloud; the simulator
    /// compares the class it launched with).
    pub cloud_drift: Option<CloudDrift>,
    /// When disruption launched it as a replacement (no-churn protects it).
    pub launched_as_replacement: Option<Timestamp>,
}

/// The node inputs of `claims` (those of no NodePool are left out), with their Nodes (`node` finds a claim's
/// Node by name) and the `pods` bound to them, as of `now`.
pub fn node_inputs<'p>(
    claims: impl IntoIterator<Item = Arc<NodeClaim>>,
    node: impl Fn(&str) -> Option<Arc<Node>>,
    pods: impl IntoIterator<Item = &'p Pod>,
    nominations: &Nominations,
    now: Timestamp,
    facts: impl Fn(&NodeClaim) -> Facts,
) -> Vec<NodeInput> {
    let mut by_node: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for pod in pods {
        if let Some(name) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            by_node.entry(name).or_default().push(pod);
        }
    }
    claims
        .into_iter()
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(labels::NODEPOOL))
        })
        .map(|claim| {
            let node = claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(&node);
            let pods = node
                .as_ref()
                .and_then(|n| n.metadata.name.as_deref())
                .and_then(|name| by_node.get(name))
                .map(|pods| pods.iter().map(|&pod| pod.clone()).collect())
                .unwrap_or_default();
            let Facts {
                cloud_drift,
                launched_as_replacement,
            } = facts(&claim);
            let mut input = NodeInput::shared(claim, node, pods);
            input.queued = input.node.as_deref().is_some_and(is_tainted_disrupted);
            input.cloud_drift = cloud_drift;
            input.launched_as_replacement = launched_as_replacement;
            let nominated = input
                .node_name()
                .into_iter()
                .chain([input.claim_name()])
                .any(|name| nominations.is_nominated(name, now));
            input.nominated = nominated;
            input
        })
        .collect()
}

/// Each NodePool's node counts over `nodes`, as its budgets count them (initialized nodes, and those of them
/// not Ready or marked for deletion).
pub fn pool_counts(nodes: &[NodeInput]) -> BTreeMap<String, PoolCounts> {
    count_nodes(nodes.iter().filter_map(|n| {
        let pool = n.claim.metadata.labels.as_ref()?.get(labels::NODEPOOL)?;
        Some((
            pool.as_str(),
            NodeState::of(&n.claim, n.node.as_deref(), n.queued),
        ))
    }))
}

/// Whether `node` carries `karpenter.sh/disrupted` (a disruption or a termination is under way).
pub fn is_tainted_disrupted(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == DISRUPTED_TAINT))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(name: &str, pool: Option<&str>, node: Option<&str>) -> NodeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": pool.map(|p| json!({"karpenter.sh/nodepool": p}))},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []},
            "status": {"nodeName": node},
        }))
        .expect("claim")
    }

    fn node(name: &str, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}}))
            .expect("node")
    }

    fn pod(name: &str, on: Option<&str>) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
                                      "spec": {"nodeName": on, "containers": []}}))
        .expect("pod")
    }

    #[test]
    fn each_claim_of_a_pool_gets_its_node_its_pods_and_its_marks() {
        let now: Timestamp = "2026-11-26T10:00:00Z".parse().expect("time");
        let nodes = [
            node(
                "n-a",
                json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]),
            ),
            node("n-b", json!([])),
        ];
        let pods = [
            pod("p1", Some("n-a")),
            pod("p2", Some("n-b")),
            pod("p3", Some("n-a")),
            pod("p4", None),
        ];
        let mut nominations = Nominations::default();
        nominations.nominate(
            "c-in-flight",
            now,
            super::super::nominations::window(Default::default()),
        );
        let inputs = node_inputs(
            [
                claim("c-a", Some("default"), Some("n-a")),
                claim("c-b", Some("default"), Some("n-b")),
                claim("c-in-flight", Some("default"), None),
                claim("unowned", None, Some("n-b")),
            ]
            .map(Arc::new),
            |name| {
                nodes
                    .iter()
                    .find(|n| n.metadata.name.as_deref() == Some(name))
                    .cloned()
                    .map(Arc::new)
            },
            &pods,
            &nominations,
            now,
            |c| Facts {
                launched_as_replacement: (c.metadata.name.as_deref() == Some("c-b")).then_some(now),
                ..Facts::default()
            },
        );
        let summary: Vec<String> = inputs
            .iter()
            .map(|n| {
                format!(
                    "{} on {:?}: {} pods, queued {}, nominated {}, replacement {}",
                    n.claim_name(),
                    n.node_name(),
                    n.pods.len(),
                    n.queued,
                    n.nominated,
                    n.launched_as_replacement.is_some(),
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                "c-a on Some(\"n-a\"): 2 pods, queued true, nominated false, replacement false",
                "c-b on Some(\"n-b\"): 1 pods, queued false, nominated false, replacement true",
                "c-in-flight on None: 0 pods, queued false, nominated true, replacement false",
            ]
        );
    }
}
