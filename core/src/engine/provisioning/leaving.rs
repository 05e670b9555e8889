//! Capacity on its way out (controller-behaviour.md §1.2). A Node being deleted, or whose NodeClaim is, is
//! not capacity the solve may place pods on, and the pods still running there are solved for again: their
//! replacement capacity launches while the node drains, not after the drain has evicted them. A claim
//! already in flight (a replacement the disruption executor made, or one an earlier pass made for the same
//! pods) is capacity like any other, so it absorbs them and nothing launches twice.
//!
//! The `karpenter.sh/disrupted` taint alone does not count as "being deleted": disruption puts it on before it
//! launches its own replacements, and a taint left behind by a crash would otherwise have pods solved for —
//! and capacity launched for them — over and over while their node stays.

use crate::api::nodeclaim::NodeClaim;
use crate::disruption::{
    fully_blocked, is_daemonset_pod, is_mirror_pod, is_reschedulable, pod_do_not_disrupt,
};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeSet, HashMap, HashSet};

/// The Nodes and NodeClaims on their way out.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Leaving {
    /// Names of Nodes being deleted or whose claim is.
    pub nodes: BTreeSet<String>,
    /// Names of claims being deleted or whose Node is.
    pub claims: BTreeSet<String>,
}

impl Leaving {
    /// The Nodes and claims of `nodes` and `claims` that are being deleted, each pulling its partner along
    /// (matched by the claim's `status.nodeName` or `status.providerID`).
    pub fn of<'a>(
        nodes: impl IntoIterator<Item = &'a Node>,
        claims: impl IntoIterator<Item = &'a NodeClaim>,
    ) -> Leaving {
        let mut leaving = Leaving::default();
        let mut names = HashSet::new();
        let mut by_provider_id = HashMap::new();
        for node in nodes {
            let Some(name) = node.metadata.name.as_deref() else {
                continue;
            };
            names.insert(name);
            if let Some(id) = node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) {
                by_provider_id.insert(id, name);
            }
            if node.metadata.deletion_timestamp.is_some() {
                leaving.nodes.insert(name.to_owned());
            }
        }
        for claim in claims {
            let Some(name) = claim.metadata.name.as_deref() else {
                continue;
            };
            let status = claim.status.as_ref();
            let node = status
                .and_then(|s| s.node_name.as_deref())
                .filter(|n| names.contains(n))
                .or_else(|| {
                    let id = status.and_then(|s| s.provider_id.as_deref())?;
                    by_provider_id.get(id).copied()
                });
            let node_leaving = node.is_some_and(|n| leaving.nodes.contains(n));
            if claim.metadata.deletion_timestamp.is_some() || node_leaving {
                leaving.claims.insert(name.to_owned());
                leaving.nodes.extend(node.map(str::to_owned));
            }
        }
        leaving
    }

    /// Whether `pod` runs on a leaving node and needs a new home that a new node would give it (see
    /// [`needs_a_new_home`]).
    /// Whether some pod of `pods` is bound to a leaving node.
    pub fn has_pods<P: AsRef<Pod>>(&self, pods: &[P]) -> bool {
        !self.nodes.is_empty()
            && pods.iter().any(|p| {
                p.as_ref()
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .is_some_and(|n| self.nodes.contains(n))
            })
    }

    /// Not a pod that PodDisruptionBudgets `pdbs` keep where it is for good ([`fully_blocked`]).
    pub fn is_reschedulable(
        &self,
        pod: &Pod,
        pdbs: &[PodDisruptionBudget],
        now: Timestamp,
    ) -> bool {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        node.is_some_and(|n| self.nodes.contains(n))
            && needs_a_new_home(pod, now)
            && !fully_blocked(pod, pdbs, now)
    }
}

/// A pod of a leaving node that must run elsewhere: active (or a terminating StatefulSet pod, whose
/// successor of the same name cannot appear until it is gone), neither a DaemonSet nor a mirror pod (they
/// live and die with their node), and without an active `karpenter.sh/do-not-disrupt` (the drain waits for
/// those, so they do not move yet).
pub fn needs_a_new_home(pod: &Pod, now: Timestamp) -> bool {
    let moving = is_reschedulable(pod) || is_terminating_stateful_set_pod(pod);
    moving && !pod_do_not_disrupt(pod, now).is_active()
}

fn is_terminating_stateful_set_pod(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let owned = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "StatefulSet");
    owned
        && pod.metadata.deletion_timestamp.is_some()
        && !matches!(phase, Some("Succeeded" | "Failed"))
        && !is_daemonset_pod(pod)
        && !is_mirror_pod(pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-11-23T00:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().expect("a timestamp")
    }

    fn node(name: &str, extra: serde_json::Value) -> Node {
        let mut base = json!({
            "metadata": {"name": name},
            "spec": {"providerID": format!("aws:///us-west-2a/i-{name}")}
        });
        json_patch::merge(&mut base, &extra);
        serde_json::from_value(base).expect("a valid Node")
    }

    fn claim(name: &str, node: Option<&str>, extra: serde_json::Value) -> NodeClaim {
        let mut base = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": name},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                     "requirements": []}
        });
        if let Some(node) = node {
            base["status"] =
                json!({"nodeName": node, "providerID": format!("aws:///us-west-2a/i-{node}")});
        }
        json_patch::merge(&mut base, &extra);
        serde_json::from_value(base).expect("a valid NodeClaim")
    }

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r1"}]},
            "spec": {"nodeName": "old", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "startTime": NOW}
        });
        json_patch::merge(&mut base, &extra);
        serde_json::from_value(base).expect("a valid pod")
    }

    fn deleting() -> serde_json::Value {
        json!({"metadata": {"deletionTimestamp": NOW}})
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn a_deleting_claim_takes_its_node_along() {
        let nodes = [node("old", json!({})), node("kept", json!({}))];
        let claims = [
            claim("old-claim", Some("old"), deleting()),
            claim("kept-claim", Some("kept"), json!({})),
        ];
        let leaving = Leaving::of(&nodes, &claims);
        assert_eq!(leaving.nodes, set(&["old"]));
        assert_eq!(leaving.claims, set(&["old-claim"]));
    }

    #[test]
    fn a_claim_is_matched_to_its_node_by_provider_id_before_it_records_the_node_name() {
        let nodes = [node("old", json!({}))];
        let claims = [claim(
            "old-claim",
            Some("old"),
            json!({"metadata": {"deletionTimestamp": NOW}, "status": {"nodeName": null}}),
        )];
        assert_eq!(Leaving::of(&nodes, &claims).nodes, set(&["old"]));
    }

    #[test]
    fn a_deleting_node_takes_its_claim_along() {
        let nodes = [node("old", deleting())];
        let claims = [claim("old-claim", Some("old"), json!({}))];
        let leaving = Leaving::of(&nodes, &claims);
        assert_eq!(leaving.nodes, set(&["old"]));
        assert_eq!(leaving.claims, set(&["old-claim"]));
    }

    #[test]
    fn a_claim_without_a_node_leaves_alone_and_a_disrupted_taint_is_no_deletion() {
        let tainted = node(
            "tainted",
            json!({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}),
        );
        let claims = [claim("in-flight", None, deleting())];
        let leaving = Leaving::of(&[tainted], &claims);
        assert!(leaving.nodes.is_empty());
        assert_eq!(leaving.claims, set(&["in-flight"]));
        assert_eq!(
            Leaving::of(&[node("n", json!({}))], &[]),
            Leaving::default()
        );
    }

    #[test]
    fn the_pods_of_a_leaving_node_are_reschedulable_and_others_are_not() {
        let leaving = Leaving::of(
            &[node("old", json!({}))],
            &[claim("c", Some("old"), deleting())],
        );
        assert!(leaving.is_reschedulable(&pod(json!({})), &[], now()));
        let elsewhere = pod(json!({"spec": {"nodeName": "other"}}));
        assert!(!leaving.is_reschedulable(&elsewhere, &[], now()));
        let unbound = pod(json!({"spec": {"nodeName": null}}));
        assert!(!leaving.is_reschedulable(&unbound, &[], now()));
    }

    #[test]
    fn pods_that_stay_with_their_node_or_are_done_need_no_new_home() {
        let daemon = pod(json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d1"}]}}));
        let mirror = pod(json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "old", "uid": "n1"}]}}));
        let static_pod =
            pod(json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}));
        let finished = pod(json!({"status": {"phase": "Succeeded"}}));
        let failed = pod(json!({"status": {"phase": "Failed"}}));
        let evicted = pod(deleting());
        for (what, pod) in [
            ("daemonset", daemon),
            ("node-owned", mirror),
            ("mirror", static_pod),
            ("succeeded", finished),
            ("failed", failed),
            ("deleting", evicted),
        ] {
            assert!(!needs_a_new_home(&pod, now()), "{what}");
        }
    }

    #[test]
    fn a_terminating_stateful_set_pod_still_needs_one() {
        let stateful = pod(
            json!({"metadata": {"deletionTimestamp": NOW, "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "s1"}]}}),
        );
        assert!(needs_a_new_home(&stateful, now()));
    }

    #[test]
    fn an_active_do_not_disrupt_keeps_a_pod_where_it_is_until_it_lapses() {
        let forever =
            pod(json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}));
        assert!(!needs_a_new_home(&forever, now()));
        let for_an_hour =
            pod(json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "1h"}}}));
        assert!(!needs_a_new_home(&for_an_hour, now()));
        let later: Timestamp = "2026-11-23T01:00:00Z".parse().expect("a timestamp");
        assert!(needs_a_new_home(&for_an_hour, later));
    }
}
