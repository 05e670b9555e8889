//! The Node taint patches of the controllers that taint and untaint Nodes (termination, disruption, the
//! lifecycle's startup taints): each tested against the taints it was computed from.

use crate::disruption::DISRUPTED_TAINT;
use k8s_openapi::api::core::v1::Node;
use serde_json::json;

/// The JSON patch setting `node`'s taints to `taints`, tested against the list it was computed from: a
/// concurrent change of the taints fails it instead of being lost, while the kubelet's status heartbeats (which
/// move the resourceVersion every few seconds) do not.
pub fn taints_patch(
    node: &Node,
    taints: Vec<k8s_openapi::api::core::v1::Taint>,
) -> serde_json::Value {
    let current = node.spec.as_ref().and_then(|s| s.taints.as_ref());
    json!([
        {"op": "test", "path": "/spec/taints", "value": current},
        {"op": "add", "path": "/spec/taints", "value": taints},
    ])
}

/// The patch adding `karpenter.sh/disrupted:NoSchedule` (replacing another effect on that key), or `None`
/// when the Node has it.
pub fn disrupted_taint_patch(node: &Node) -> Option<serde_json::Value> {
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints
        .iter()
        .any(|t| t.key == DISRUPTED_TAINT && t.effect == "NoSchedule")
    {
        return None;
    }
    let mut taints: Vec<_> = taints
        .into_iter()
        .filter(|t| t.key != DISRUPTED_TAINT)
        .collect();
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: DISRUPTED_TAINT.into(),
        effect: "NoSchedule".into(),
        value: None,
        time_added: None,
    });
    Some(taints_patch(node, taints))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disrupted_taint_replaces_another_effect_and_is_added_once() {
        let node = kerf_testkit::node(
            "n",
            json!({"metadata": {"resourceVersion": "3"}, "spec": {"taints": [
                {"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
            ]}}),
        );
        let patch = disrupted_taint_patch(&node).expect("a patch");
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/spec/taints", "value": [
                    {"key": "karpenter.sh/disrupted", "effect": "NoExecute"},
                    {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
                ]},
                {"op": "add", "path": "/spec/taints", "value": [
                    {"key": "dedicated", "value": "a", "effect": "NoSchedule"},
                    {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"},
                ]},
            ])
        );
        let untainted = kerf_testkit::node("n", json!({"spec": {}}));
        assert_eq!(
            disrupted_taint_patch(&untainted).expect("a patch")[0],
            json!({"op": "test", "path": "/spec/taints", "value": null}),
            "a Node without taints is tested for having none"
        );
        let tainted = kerf_testkit::node(
            "n",
            json!({"spec": {"taints": [{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}),
        );
        assert_eq!(disrupted_taint_patch(&tainted), None);
    }
}
