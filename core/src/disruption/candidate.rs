//! The blockers of controller-behaviour.md §3.2 that a node's annotations and pods raise, put together: why a
//! node may not be a disruption candidate, worded for the `DisruptionBlocked` event.

use super::do_not_disrupt::{node_do_not_disrupt, scan_pods, DO_NOT_DISRUPT};
use super::pdb::{pdb_block, PdbBlock};
use crate::api::nodeclaim::NodeClaim;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;

/// Why a node is not a candidate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Blocker {
    #[error("disruption is blocked through the {DO_NOT_DISRUPT:?} annotation")]
    NodeDoNotDisrupt,
    #[error("pod {pod:?} has the {DO_NOT_DISRUPT:?} annotation")]
    PodDoNotDisrupt { pod: String },
    #[error(transparent)]
    Pdb(PdbBlock),
}

/// What the caller knows of one node.
#[derive(Clone, Copy, Debug)]
pub struct NodeView<'a> {
    pub node: Option<&'a Node>,
    pub claim: Option<&'a NodeClaim>,
    /// Every pod bound to the node.
    pub pods: &'a [Pod],
}

/// The first blocker of `view`, node annotation first, then pods' do-not-disrupt, then PDBs.
/// `pod_blockers_apply` is false for drift on a claim with `terminationGracePeriod`, which ignores the
/// pod-level blockers.
pub fn blocker(
    view: NodeView<'_>,
    pdbs: &[PodDisruptionBudget],
    now: Timestamp,
    pod_blockers_apply: bool,
) -> Option<Blocker> {
    if node_do_not_disrupt(view.node, view.claim) {
        return Some(Blocker::NodeDoNotDisrupt);
    }
    if !pod_blockers_apply {
        return None;
    }
    if let Some(pod) = scan_pods(view.pods, now).blocking {
        return Some(Blocker::PodDoNotDisrupt { pod });
    }
    pdb_block(view.pods, pdbs, now).map(Blocker::Pdb)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::pod;
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2026-11-22T12:00:00Z".parse().expect("timestamp")
    }

    fn web(annotations: serde_json::Value) -> Pod {
        pod(json!({
            "metadata": {"name": "web", "namespace": "shop", "labels": {"app": "web"}, "annotations": annotations},
            "status": {"phase": "Running"},
        }))
    }

    fn blocking_pdb() -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "shop"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1},
        }))
        .expect("pdb")
    }

    #[test]
    fn the_node_annotation_comes_first_and_cannot_be_waived() {
        let node: Node = serde_json::from_value(
            json!({"metadata": {"name": "n", "annotations": {DO_NOT_DISRUPT: "true"}}}),
        )
        .expect("node");
        let view = NodeView {
            node: Some(&node),
            claim: None,
            pods: &[],
        };
        for pod_blockers_apply in [true, false] {
            assert_eq!(
                blocker(view, &[], now(), pod_blockers_apply),
                Some(Blocker::NodeDoNotDisrupt)
            );
        }
    }

    #[test]
    fn pod_annotations_then_pdbs_block_unless_waived() {
        let protected = [web(json!({DO_NOT_DISRUPT: "true"}))];
        let view = NodeView {
            node: None,
            claim: None,
            pods: &protected,
        };
        let pdbs = [blocking_pdb()];
        assert_eq!(
            blocker(view, &pdbs, now(), true).map(|b| b.to_string()),
            Some("pod \"shop/web\" has the \"karpenter.sh/do-not-disrupt\" annotation".to_owned())
        );
        let plain = [web(json!(null))];
        let view = NodeView {
            pods: &plain,
            ..view
        };
        assert!(matches!(
            blocker(view, &pdbs, now(), true),
            Some(Blocker::Pdb(PdbBlock::NoDisruptionsAllowed { .. }))
        ));
        assert_eq!(blocker(view, &pdbs, now(), false), None);
        assert_eq!(blocker(view, &[], now(), true), None);
    }
}
