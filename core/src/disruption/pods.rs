//! What disruption asks of a pod: whether it is active, owned by a DaemonSet, or a mirror (static) pod.

use k8s_openapi::api::core::v1::Pod;

/// Set by the kubelet on the API object of a static pod.
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Not terminal (`Succeeded` / `Failed`) and not being deleted.
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none() && !matches!(phase, Some("Succeeded" | "Failed"))
}

pub fn is_daemonset_pod(pod: &Pod) -> bool {
    owned_by_kind(pod, "DaemonSet")
}

/// A static pod's mirror: it carries the mirror annotation, and its owner is the Node.
pub fn is_mirror_pod(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
        || owned_by_kind(pod, "Node")
}

/// Pods that must find a new home when their node goes: active, neither DaemonSet nor mirror pods.
pub fn is_reschedulable(pod: &Pod) -> bool {
    is_active(pod) && !is_daemonset_pod(pod) && !is_mirror_pod(pod)
}

/// `namespace/name`, for messages.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Any owner of that kind counts, controller or not, as in Karpenter's `IsOwnedBy`.
fn owned_by_kind(pod: &Pod, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::pod;
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_pods() {
        let plain = pod(json!({"metadata": {"name": "a"}, "status": {"phase": "Running"}}));
        assert!(is_reschedulable(&plain));
        let done = pod(json!({"metadata": {"name": "a"}, "status": {"phase": "Succeeded"}}));
        assert!(!is_active(&done));
        let deleting =
            pod(json!({"metadata": {"name": "a", "deletionTimestamp": "2026-11-22T00:00:00Z"}}));
        assert!(!is_active(&deleting));
        let ds = pod(json!({"metadata": {"name": "a", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}));
        assert!(is_daemonset_pod(&ds) && !is_reschedulable(&ds));
        let mirror = pod(
            json!({"metadata": {"name": "a", "annotations": {"kubernetes.io/config.mirror": "x"}}}),
        );
        assert!(is_mirror_pod(&mirror) && !is_reschedulable(&mirror));
        assert_eq!(pod_key(&plain), "default/a");
    }
}
