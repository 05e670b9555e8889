//! Which pods provisioning acts on (controller-behaviour.md §1.1): the kube-scheduler marked them
//! Unschedulable, nothing has bound or nominated them, they are alive, and no DaemonSet or Node owns them
//! (those pods follow their node; a new node would not help them).

use k8s_openapi::api::core::v1::Pod;

/// Whether `pod` is waiting for capacity kerf could provide.
pub fn is_provisionable(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "PodScheduled" && c.reason.as_deref() == Some("Unschedulable"));
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let nominated = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let terminal = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    let owned_by_node = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet" || o.kind == "Node");
    unschedulable
        && !bound
        && !nominated
        && !terminal
        && pod.metadata.deletion_timestamp.is_none()
        && !owned_by_node
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(extra: serde_json::Value) -> Pod {
        let mut base = json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
            ]}
        });
        json_patch::merge(&mut base, &extra);
        serde_json::from_value(base).expect("a valid pod")
    }

    #[test]
    fn an_unschedulable_pending_pod_is_provisionable() {
        assert!(is_provisionable(&pod(json!({}))));
    }

    #[test]
    fn pods_the_scheduler_has_not_given_up_on_are_not() {
        let scheduling = pod(json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}
        ]}}));
        assert!(!is_provisionable(&scheduling));
        assert!(!is_provisionable(&pod(
            json!({"status": {"conditions": null}})
        )));
    }

    #[test]
    fn bound_nominated_terminal_and_deleting_pods_are_not() {
        assert!(!is_provisionable(&pod(json!({"spec": {"nodeName": "n1"}}))));
        assert!(!is_provisionable(&pod(
            json!({"status": {"nominatedNodeName": "n1"}})
        )));
        assert!(!is_provisionable(&pod(
            json!({"status": {"phase": "Failed"}})
        )));
        assert!(!is_provisionable(&pod(
            json!({"status": {"phase": "Succeeded"}})
        )));
        assert!(!is_provisionable(&pod(
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
        )));
    }

    #[test]
    fn daemonset_and_mirror_pods_are_not() {
        for kind in ["DaemonSet", "Node"] {
            let owned = pod(json!({"metadata": {"ownerReferences": [
                {"apiVersion": "v1", "kind": kind, "name": "o", "uid": "o1"}
            ]}}));
            assert!(!is_provisionable(&owned), "{kind}");
        }
        let replica = pod(json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r1"}
        ]}}));
        assert!(is_provisionable(&replica));
    }
}
