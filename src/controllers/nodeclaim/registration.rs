//! Registration and initialization of a launched NodeClaim's Node, decided purely: which Node is the
//! claim's, the patch that makes it the claim's (labels, taints, finalizer, owner), and what still keeps it
//! from being initialized.

use super::super::kit::calls::TERMINATION_FINALIZER;
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::UNREGISTERED_TAINT_KEY;
use k8s_openapi::api::core::v1::{Node, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::{json, Value};
use std::sync::Arc;

/// A Node labelled so keeps the taints it registered with: the claim's are not synced onto it.
const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";

/// Taints a Node carries while it is coming up; none may be left when it is initialized.
const EPHEMERAL_TAINTS: [&str; 4] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    UNREGISTERED_TAINT_KEY,
];
const READINESS_TAINT_PREFIX: &str = "readiness.k8s.io/";

/// Resources every Node reports; other requested resources must show up in its allocatable first.
const WELL_KNOWN_RESOURCES: [&str; 4] = ["cpu", "memory", "pods", "ephemeral-storage"];

/// The Node whose `spec.providerID` is `provider_id`.
pub fn node_with_provider_id(nodes: &[Arc<Node>], provider_id: &str) -> Option<Arc<Node>> {
    nodes
        .iter()
        .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
        .cloned()
}

fn taints(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// The Node registered without `karpenter.sh/unregistered` before kerf synced it: Karpenter warns
/// (`UnregisteredTaintMissing`) and goes on.
pub fn unregistered_taint_missing(node: &Node) -> bool {
    let synced = node
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(labels::NODE_REGISTERED));
    !synced && !taints(node).iter().any(|t| t.key == UNREGISTERED_TAINT_KEY)
}

/// The Node's taints without `karpenter.sh/unregistered`, when it has that taint. Registration lifts it, but
/// a writer holding an older copy of the taint list can put it back: the node lifecycle controller lifts its
/// own `node.kubernetes.io/not-ready` taint by replacing the whole list from its cache.
pub fn taints_without_unregistered(node: &Node) -> Option<Vec<Taint>> {
    let taints = taints(node);
    taints
        .iter()
        .any(|t| t.key == UNREGISTERED_TAINT_KEY)
        .then(|| {
            taints
                .iter()
                .filter(|t| t.key != UNREGISTERED_TAINT_KEY)
                .cloned()
                .collect()
        })
}

/// The merge patch that registers `node` for `claim`: the claim's labels and `karpenter.sh/registered`
/// and its annotations (the template's, `karpenter.sh/do-not-disrupt` among them),
/// its taints and startup taints added (unless the Node says not to), `karpenter.sh/unregistered` lifted,
/// the termination finalizer and an owner reference to the claim. It carries the Node's resourceVersion,
/// so that it fails (409) rather than overwrite a list another writer changed meanwhile.
pub fn registration_patch(node: &Node, claim: &NodeClaim) -> Value {
    let (node_labels, annotations) = crate::engine::launch::registered_metadata(claim);

    let sync_taints = node
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(DO_NOT_SYNC_TAINTS))
        .is_none_or(|v| v != "true");
    let mut new_taints: Vec<Taint> = taints(node)
        .iter()
        .filter(|t| t.key != UNREGISTERED_TAINT_KEY)
        .cloned()
        .collect();
    if sync_taints {
        let wanted = claim
            .spec
            .taints
            .iter()
            .chain(&claim.spec.startup_taints)
            .flatten();
        for taint in wanted {
            let effect = taint.effect.as_str();
            if !new_taints
                .iter()
                .any(|t| t.key == taint.key && t.effect == effect)
            {
                new_taints.push(Taint {
                    key: taint.key.clone(),
                    value: taint.value.clone().filter(|v| !v.is_empty()),
                    effect: effect.to_owned(),
                    time_added: None,
                });
            }
        }
    }

    let mut finalizers = node.metadata.finalizers.clone().unwrap_or_default();
    if !finalizers.iter().any(|f| f == TERMINATION_FINALIZER) {
        finalizers.push(TERMINATION_FINALIZER.to_owned());
    }
    let mut owners = node.metadata.owner_references.clone().unwrap_or_default();
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    if !owners.iter().any(|o| o.uid == uid) {
        owners.push(OwnerReference {
            api_version: "karpenter.sh/v1".into(),
            kind: "NodeClaim".into(),
            name: claim.metadata.name.clone().unwrap_or_default(),
            uid,
            block_owner_deletion: Some(true),
            controller: None,
        });
    }
    json!({
        "metadata": {
            "resourceVersion": node.metadata.resource_version,
            "labels": node_labels,
            "annotations": annotations,
            "finalizers": finalizers,
            "ownerReferences": owners,
        },
        "spec": {"taints": new_taints},
    })
}

/// What keeps the claim's registered Node from being initialized, or `None` when it is: it must be Ready,
/// without startup or ephemeral taints, with every requested extended resource allocatable.
pub fn initialization_blocker(node: &Node, claim: &NodeClaim) -> Option<String> {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return Some("the Node is not Ready".into());
    }
    let startup: Vec<&str> = claim
        .spec
        .startup_taints
        .iter()
        .flatten()
        .map(|t| t.key.as_str())
        .collect();
    if let Some(t) = taints(node).iter().find(|t| {
        startup.contains(&t.key.as_str())
            || EPHEMERAL_TAINTS.contains(&t.key.as_str())
            || t.key.starts_with(READINESS_TAINT_PREFIX)
    }) {
        return Some(format!("the Node still has the taint {}", t.key));
    }
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let requested = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .into_iter()
        .flatten()
        .map(|(name, _)| name.as_str())
        .filter(|name| !WELL_KNOWN_RESOURCES.contains(name));
    for name in requested {
        let registered = allocatable
            .and_then(|a| a.get(name))
            .is_some_and(|q| !q.0.trim_start_matches('0').is_empty());
        if !registered {
            return Some(format!("the Node has no allocatable {name} yet"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(value: Value) -> Node {
        serde_json::from_value(value).expect("node")
    }

    fn claim(value: Value) -> NodeClaim {
        let mut base = json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "uid": "uid-c", "labels": {"karpenter.sh/nodepool": "p", "team": "a"}},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                "requirements": [],
                "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "cni", "effect": "NoSchedule"}],
            },
        });
        json_merge(&mut base, value);
        serde_json::from_value(base).expect("claim")
    }

    fn json_merge(base: &mut Value, patch: Value) {
        if let (Some(b), Value::Object(p)) = (base.as_object_mut(), &patch) {
            for (k, v) in p {
                json_merge(b.entry(k.clone()).or_insert(Value::Null), v.clone());
            }
        } else {
            *base = patch;
        }
    }

    #[test]
    fn an_unregistered_taint_put_back_is_found_and_the_rest_kept() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"taints": [
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                {"key": "dedicated", "value": "a", "effect": "NoSchedule"}
            ]}
        }))
        .expect("a Node");
        let kept = taints_without_unregistered(&node).expect("the taint is there");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].key, "dedicated");
        let clean: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"}, "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}
        }))
        .expect("a Node");
        assert_eq!(taints_without_unregistered(&clean), None);
    }

    #[test]
    fn the_node_of_a_claim_is_found_by_provider_id() {
        let a = Arc::new(node(
            json!({"metadata": {"name": "a"}, "spec": {"providerID": "aws:///z/i-1"}}),
        ));
        let b = Arc::new(node(json!({"metadata": {"name": "b"}})));
        let nodes = [b, a.clone()];
        assert_eq!(node_with_provider_id(&nodes, "aws:///z/i-1"), Some(a));
        assert_eq!(node_with_provider_id(&nodes, "aws:///z/i-2"), None);
    }

    #[test]
    fn registration_syncs_labels_and_taints_and_lifts_the_unregistered_taint() {
        let n = node(json!({
            "metadata": {"name": "n", "resourceVersion": "7", "labels": {"kubernetes.io/hostname": "n"},
                         "finalizers": ["other"]},
            "spec": {"taints": [
                {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
            ]},
        }));
        assert!(!unregistered_taint_missing(&n));
        // Karpenter's registration suite: "should sync the annotations from the NodeClaim to the Node".
        let annotated =
            claim(json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}));
        let patch = registration_patch(&n, &annotated);
        assert_eq!(
            patch,
            json!({
                "metadata": {
                    "resourceVersion": "7",
                    "labels": {"karpenter.sh/nodepool": "p", "team": "a", "karpenter.sh/registered": "true"},
                    "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                    "finalizers": ["other", "karpenter.sh/termination"],
                    "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "c",
                                         "uid": "uid-c", "blockOwnerDeletion": true}],
                },
                "spec": {"taints": [
                    {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
                    {"key": "cni", "effect": "NoSchedule"},
                ]},
            })
        );
    }

    #[test]
    fn a_node_may_keep_its_own_taints_and_a_missing_unregistered_taint_is_noticed() {
        let n = node(json!({
            "metadata": {"name": "n", "labels": {"karpenter.sh/do-not-sync-taints": "true"}},
            "spec": {"taints": [{"key": "mine", "effect": "NoExecute"}]},
        }));
        assert!(unregistered_taint_missing(&n));
        let patch = registration_patch(&n, &claim(json!({})));
        assert_eq!(
            patch["spec"]["taints"],
            json!([{"key": "mine", "effect": "NoExecute"}])
        );
        let synced =
            node(json!({"metadata": {"name": "n", "labels": {"karpenter.sh/registered": "true"}}}));
        assert!(!unregistered_taint_missing(&synced));
    }

    #[test]
    fn initialization_waits_for_ready_taints_and_extended_resources() {
        let c = claim(
            json!({"spec": {"resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}}),
        );
        let ready = json!([{"type": "Ready", "status": "True"}]);
        let not_ready = node(
            json!({"metadata": {"name": "n"}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        );
        assert_eq!(
            initialization_blocker(&not_ready, &c).as_deref(),
            Some("the Node is not Ready")
        );
        let startup = node(
            json!({"metadata": {"name": "n"}, "spec": {"taints": [{"key": "cni", "effect": "NoSchedule"}]},
                                  "status": {"conditions": ready}}),
        );
        assert_eq!(
            initialization_blocker(&startup, &c).as_deref(),
            Some("the Node still has the taint cni")
        );
        let ephemeral = node(json!({"metadata": {"name": "n"},
            "spec": {"taints": [{"key": "readiness.k8s.io/net", "effect": "NoSchedule"}]},
            "status": {"conditions": ready}}));
        assert!(initialization_blocker(&ephemeral, &c).is_some());
        let no_gpu = node(json!({"metadata": {"name": "n"},
            "status": {"conditions": ready, "allocatable": {"cpu": "2", "nvidia.com/gpu": "0"}}}));
        assert_eq!(
            initialization_blocker(&no_gpu, &c).as_deref(),
            Some("the Node has no allocatable nvidia.com/gpu yet")
        );
        let done = node(json!({"metadata": {"name": "n"},
            "spec": {"taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}]},
            "status": {"conditions": ready, "allocatable": {"cpu": "2", "nvidia.com/gpu": "1"}}}));
        assert_eq!(initialization_blocker(&done, &c), None);
    }
}
