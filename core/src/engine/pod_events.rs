//! `status.lastPodEventTime`: when a pod last arrived at or left a claim's node. `consolidateAfter` counts from
//! it (from initialization while there is none), so a node that just lost its last pod is not empty "for long"
//! because it has been initialized for long.
//!
//! A pod event is a pod bound to a node, or a bound pod going terminal (Succeeded/Failed) or terminating
//! (deletion started). DaemonSet pods are not events: they come and go with the node itself. Writes are
//! deduplicated: a claim stamped less than [`DEDUPE`] ago is not stamped again, so a Deployment rolling 50 pods
//! onto a node writes its status a handful of times, not 50 (Karpenter's `nodeclaim.podevents` controller,
//! `pkg/controllers/nodeclaim/podevents`).

use crate::disruption::is_daemonset_pod;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// How long after one stamp another is skipped.
pub const DEDUPE: SignedDuration = SignedDuration::from_secs(10);

/// What of a pod makes its events: its node, and whether it is terminal or terminating.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodMark {
    pub node: Option<String>,
    pub terminal: bool,
    pub terminating: bool,
}

impl PodMark {
    /// The mark of `pod`; `None` for a DaemonSet pod, which makes no events.
    pub fn of(pod: &Pod) -> Option<PodMark> {
        if is_daemonset_pod(pod) {
            return None;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        Some(PodMark {
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            terminal: matches!(phase, Some("Succeeded" | "Failed")),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        })
    }
}

/// The node on which going from `old` to `new` is a pod event, if it is one. A pod first seen already bound
/// (`old` is `None`) is no event: it is how a restarted controller sees every running pod, and Karpenter's
/// controller, too, acts on updates only.
pub fn event_node(old: Option<&PodMark>, new: &PodMark) -> Option<String> {
    let old = old?;
    let node = new.node.as_ref()?;
    let bound = old.node.is_none();
    let went_terminal = !old.terminal && new.terminal;
    let went_terminating = !old.terminating && new.terminating;
    (bound || went_terminal || went_terminating).then(|| node.clone())
}

/// Whether a claim last stamped at `last` (RFC 3339, as its status holds it) is stamped at `now`.
pub fn stamp_due(last: Option<&str>, now: Timestamp) -> bool {
    match last.and_then(|t| t.parse::<Timestamp>().ok()) {
        Some(last) => now.duration_since(last) >= DEDUPE,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mark(node: Option<&str>, terminal: bool, terminating: bool) -> PodMark {
        PodMark {
            node: node.map(str::to_owned),
            terminal,
            terminating,
        }
    }

    /// Karpenter's podevents suite: "should set the nodeclaim lastPodEvent" on a bind, on a terminal phase, on a
    /// deletion; "should not set the nodeclaim lastPodEvent when the pod has no node / is a daemonset pod";
    /// "should succeed to update the lastPodEvent after the dedupe timeout".
    #[test]
    fn binds_terminal_phases_and_deletions_are_events_and_nothing_else_is() {
        let cases = [
            (
                "bound",
                Some(mark(None, false, false)),
                mark(Some("n"), false, false),
                Some("n"),
            ),
            (
                "went terminal",
                Some(mark(Some("n"), false, false)),
                mark(Some("n"), true, false),
                Some("n"),
            ),
            (
                "went terminating",
                Some(mark(Some("n"), false, false)),
                mark(Some("n"), false, true),
                Some("n"),
            ),
            (
                "unchanged",
                Some(mark(Some("n"), false, false)),
                mark(Some("n"), false, false),
                None,
            ),
            (
                "still terminal",
                Some(mark(Some("n"), true, false)),
                mark(Some("n"), true, true),
                Some("n"),
            ),
            (
                "first seen bound",
                None,
                mark(Some("n"), false, false),
                None,
            ),
            (
                "never bound",
                Some(mark(None, false, false)),
                mark(None, true, true),
                None,
            ),
        ];
        for (name, old, new, want) in cases {
            assert_eq!(event_node(old.as_ref(), &new).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn daemonset_pods_make_no_events() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "d", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                "name": "ds", "uid": "u", "controller": true}]},
            "spec": {"nodeName": "n", "containers": []},
        }))
        .expect("pod");
        assert_eq!(PodMark::of(&pod), None);
    }

    #[test]
    fn a_stamp_within_ten_seconds_of_the_last_is_skipped() {
        let now: Timestamp = "2026-11-26T10:00:10Z".parse().expect("time");
        assert!(stamp_due(None, now));
        assert!(stamp_due(Some("2026-11-26T10:00:00Z"), now));
        assert!(!stamp_due(Some("2026-11-26T10:00:01Z"), now));
        assert!(
            stamp_due(Some("not a time"), now),
            "an unreadable stamp is replaced"
        );
    }
}
