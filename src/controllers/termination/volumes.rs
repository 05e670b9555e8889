//! Which VolumeAttachments still hold a drained node's instance (Karpenter's `awaitVolumeDetachment` and
//! `filterVolumeAttachments` in `node/termination/controller.go`): the attachments of the node, except those of
//! volumes no drain moves (a persistent volume claimed by a pod the drain leaves on the node: one tolerating
//! `karpenter.sh/disrupted`, a mirror pod, one stuck terminating) and those of inline volumes (no persistent
//! volume named). The attach-detach controller deletes the others once their pods are gone; the instance is
//! terminated only then, so that a volume is not yanked from a running kernel, unless the claim's
//! `terminationGracePeriod` has run out. Pure.

use super::drain::is_drainable;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use std::collections::HashSet;
use std::sync::Arc;

/// At most this many attachment names are listed in an `AwaitingVolumeDetachment` Event.
const NAMES_LISTED: usize = 5;

/// The attachments of node `node` the termination waits for, sorted by name. `pods` are the pods bound to the
/// node; `claim_of(namespace, name)` finds a PersistentVolumeClaim (a claim not found frees nothing).
pub fn pending<'a>(
    node: &str,
    attachments: &'a [Arc<VolumeAttachment>],
    pods: &[Arc<Pod>],
    claim_of: impl Fn(&str, &str) -> Option<Arc<PersistentVolumeClaim>>,
    now: Timestamp,
) -> Vec<&'a VolumeAttachment> {
    let mut on_node: Vec<&VolumeAttachment> = attachments
        .iter()
        .map(AsRef::as_ref)
        .filter(|a| a.spec.node_name == node)
        .collect();
    if on_node.is_empty() {
        return on_node;
    }
    let staying: HashSet<String> = pods
        .iter()
        .filter(|p| !is_drainable(p, now))
        .flat_map(|pod| {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            claim_names(pod)
                .filter_map(|name| claim_of(namespace, &name))
                .filter_map(|claim| claim.spec.as_ref()?.volume_name.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    on_node.retain(|a| {
        a.spec
            .source
            .persistent_volume_name
            .as_ref()
            .is_some_and(|volume| !staying.contains(volume))
    });
    on_node.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    on_node
}

/// The PersistentVolumeClaims `pod` mounts: named ones, and the one of each generic ephemeral volume
/// (`<pod>-<volume>`, as Kubernetes names them).
fn claim_names(pod: &Pod) -> impl Iterator<Item = String> + '_ {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(move |v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(claim), _) => Some(claim.claim_name.clone()),
            (None, Some(_)) => Some(format!("{pod_name}-{}", v.name)),
            (None, None) => None,
        })
}

/// The message of the Node Event `AwaitingVolumeDetachment` (Karpenter's wording, at most [`NAMES_LISTED`]
/// names).
pub fn awaiting_message(attachments: &[&VolumeAttachment]) -> String {
    let names: Vec<&str> = attachments
        .iter()
        .map(|a| a.metadata.name.as_deref().unwrap_or_default())
        .collect();
    let mut listed = names
        .iter()
        .take(NAMES_LISTED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > NAMES_LISTED {
        listed.push_str(&format!(" and {} other(s)", names.len() - NAMES_LISTED));
    }
    format!("Awaiting deletion of bound volumeattachments ({listed})")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attachment(name: &str, node: &str, volume: Option<&str>) -> Arc<VolumeAttachment> {
        let source = match volume {
            Some(v) => json!({"persistentVolumeName": v}),
            None => json!({"inlineVolumeSpec": {"csi": {"driver": "d", "volumeHandle": "h"}}}),
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source},
            }))
            .expect("a VolumeAttachment"),
        )
    }

    fn pod(name: &str, volumes: serde_json::Value, tolerates: bool) -> Arc<Pod> {
        let tolerations = if tolerates {
            json!([{"key": "karpenter.sh/disrupted", "operator": "Exists"}])
        } else {
            json!([])
        };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"containers": [], "nodeName": "node-a", "volumes": volumes,
                         "tolerations": tolerations},
                "status": {"phase": "Running"},
            }))
            .expect("a pod"),
        )
    }

    fn claims(name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let volume = match name {
            "data" => "pv-data",
            "keeper-scratch" => "pv-scratch",
            _ => return None,
        };
        Some(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"},
                                          "spec": {"volumeName": volume}}))
            .expect("a claim"),
        ))
    }

    fn names<'a>(pending: &[&'a VolumeAttachment]) -> Vec<&'a str> {
        pending
            .iter()
            .map(|a| a.metadata.name.as_deref().unwrap_or_default())
            .collect()
    }

    /// Karpenter's termination suite: "should wait for VolumeAttachments", "should only wait for
    /// VolumeAttachments associated with drainable pods", "should not wait for VolumeAttachments of
    /// non-drainable pods"; and inline volumes never hold a node.
    #[test]
    fn only_attachments_of_volumes_the_drain_moves_are_waited_for() {
        let now: Timestamp = "2026-11-23T00:00:00Z".parse().expect("time");
        let attachments = [
            attachment("va-other-node", "node-b", Some("pv-1")),
            attachment("va-2", "node-a", Some("pv-moved")),
            attachment("va-inline", "node-a", None),
            attachment("va-data", "node-a", Some("pv-data")),
            attachment("va-scratch", "node-a", Some("pv-scratch")),
            attachment("va-1", "node-a", Some("pv-gone-pod")),
        ];
        let lookup = |namespace: &str, name: &str| {
            assert_eq!(namespace, "ns");
            claims(name)
        };
        // No pod stays: every attachment of the node with a persistent volume holds it.
        let waited = pending("node-a", &attachments, &[], lookup, now);
        assert_eq!(names(&waited), ["va-1", "va-2", "va-data", "va-scratch"]);
        // A pod tolerating the disrupted taint stays, with its named and its ephemeral volume's claims.
        let volumes = json!([
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "missing", "persistentVolumeClaim": {"claimName": "no-such-claim"}}]);
        let keeper = pod("keeper", volumes.clone(), true);
        let waited = pending("node-a", &attachments, &[keeper], lookup, now);
        assert_eq!(names(&waited), ["va-1", "va-2"]);
        // The same pod without the toleration is drained, so its volumes are waited for.
        let drained = pod("keeper", volumes, false);
        let waited = pending("node-a", &attachments, &[drained], lookup, now);
        assert_eq!(waited.len(), 4);
        assert!(pending("node-c", &attachments, &[], lookup, now).is_empty());
    }

    #[test]
    fn the_event_names_at_most_five_attachments() {
        let all: Vec<Arc<VolumeAttachment>> = (1..=7)
            .map(|i| attachment(&format!("va-{i}"), "n", Some("pv")))
            .collect();
        let refs: Vec<&VolumeAttachment> = all.iter().map(AsRef::as_ref).collect();
        assert_eq!(
            awaiting_message(&refs[..2]),
            "Awaiting deletion of bound volumeattachments (va-1, va-2)"
        );
        assert_eq!(
            awaiting_message(&refs),
            "Awaiting deletion of bound volumeattachments (va-1, va-2, va-3, va-4, va-5 and 2 other(s))"
        );
    }
}
