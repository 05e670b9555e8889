//! `karpenter.sh/do-not-disrupt` (controller-behaviour.md §3.2): on pods `"true"` or a Go duration counted
//! from `status.startTime`; on nodes and claims only `"true"`.

use super::go_duration::parse_go_duration;
use super::pods::{is_active, pod_key};
use crate::api::nodeclaim::NodeClaim;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

pub use crate::api::well_known::DO_NOT_DISRUPT;

/// The state of a pod's do-not-disrupt annotation at an instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodDoNotDisrupt {
    /// No annotation, or its duration has elapsed.
    Inactive,
    /// `"true"` (`until: None`), a duration not yet elapsed (`until` when it does), or a duration on a pod
    /// without `startTime` (`until: None`: counted as active).
    Active { until: Option<Timestamp> },
    /// A value that is neither `"true"` nor a duration: it counts as absent, and deserves an
    /// `InvalidDoNotDisruptAnnotation` event.
    Invalid { value: String },
}

impl PodDoNotDisrupt {
    pub fn is_active(&self) -> bool {
        matches!(self, PodDoNotDisrupt::Active { .. })
    }
}

pub fn pod_do_not_disrupt(pod: &Pod, now: Timestamp) -> PodDoNotDisrupt {
    let Some(value) = annotation(pod.metadata.annotations.as_ref()) else {
        return PodDoNotDisrupt::Inactive;
    };
    if value == "true" {
        return PodDoNotDisrupt::Active { until: None };
    }
    let Some(duration) = parse_go_duration(value) else {
        return PodDoNotDisrupt::Invalid {
            value: value.to_owned(),
        };
    };
    let Some(start) = pod.status.as_ref().and_then(|s| s.start_time.as_ref()) else {
        return PodDoNotDisrupt::Active { until: None };
    };
    match start.0.checked_add(duration) {
        Ok(end) if now < end => PodDoNotDisrupt::Active { until: Some(end) },
        // Beyond the representable range means "for ever".
        Err(_) if duration.is_positive() => PodDoNotDisrupt::Active { until: None },
        _ => PodDoNotDisrupt::Inactive,
    }
}

/// What the pods of one node say about disrupting it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodsDoNotDisrupt {
    /// The first pod (`namespace/name`) whose annotation is active: the node is not a candidate.
    pub blocking: Option<String>,
    /// Pods whose value is invalid, with the value, for `InvalidDoNotDisruptAnnotation` events.
    pub invalid: Vec<(String, String)>,
}

/// Scans a node's pods, DaemonSet and mirror pods included. Finished or deleting pods are skipped: a completed
/// Job must not pin its node for ever.
pub fn scan_pods(pods: &[Pod], now: Timestamp) -> PodsDoNotDisrupt {
    let mut scan = PodsDoNotDisrupt::default();
    for pod in pods.iter().filter(|p| is_active(p)) {
        match pod_do_not_disrupt(pod, now) {
            PodDoNotDisrupt::Active { .. } if scan.blocking.is_none() => {
                scan.blocking = Some(pod_key(pod));
            }
            PodDoNotDisrupt::Invalid { value } => scan.invalid.push((pod_key(pod), value)),
            _ => {}
        }
    }
    scan
}

/// Whether a node may not be disrupted: only `"true"` counts, read from the Node once it exists and from the
/// claim before registration.
pub fn node_do_not_disrupt(node: Option<&Node>, claim: Option<&NodeClaim>) -> bool {
    let annotations = match (node, claim) {
        (Some(node), _) => node.metadata.annotations.as_ref(),
        (None, Some(claim)) => claim.metadata.annotations.as_ref(),
        (None, None) => None,
    };
    annotation(annotations) == Some("true")
}

fn annotation(annotations: Option<&BTreeMap<String, String>>) -> Option<&str> {
    annotations
        .and_then(|a| a.get(DO_NOT_DISRUPT))
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{claim, pod};
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn annotated(value: &str, start: Option<&str>) -> Pod {
        pod(json!({
            "metadata": {"name": "p", "annotations": {DO_NOT_DISRUPT: value}},
            "status": {"startTime": start},
        }))
    }

    #[test]
    fn true_is_active_for_ever() {
        assert_eq!(
            pod_do_not_disrupt(&annotated("true", None), at("2026-11-22T00:00:00Z")),
            PodDoNotDisrupt::Active { until: None }
        );
    }

    #[test]
    fn a_duration_runs_from_the_start_time() {
        let p = annotated("1h30m", Some("2026-11-22T10:00:00Z"));
        assert_eq!(
            pod_do_not_disrupt(&p, at("2026-11-22T11:29:59Z")),
            PodDoNotDisrupt::Active {
                until: Some(at("2026-11-22T11:30:00Z"))
            }
        );
        assert_eq!(
            pod_do_not_disrupt(&p, at("2026-11-22T11:30:00Z")),
            PodDoNotDisrupt::Inactive
        );
    }

    #[test]
    fn a_duration_without_start_time_is_active() {
        assert!(pod_do_not_disrupt(&annotated("5m", None), at("2026-11-22T00:00:00Z")).is_active());
    }

    #[test]
    fn invalid_values_count_as_absent_and_are_reported() {
        for value in ["yes", "True", "1d", ""] {
            let state = pod_do_not_disrupt(&annotated(value, None), at("2026-11-22T00:00:00Z"));
            assert_eq!(
                state,
                PodDoNotDisrupt::Invalid {
                    value: value.to_owned()
                }
            );
            assert!(!state.is_active());
        }
        let plain = pod(json!({"metadata": {"name": "p"}}));
        assert_eq!(
            pod_do_not_disrupt(&plain, at("2026-11-22T00:00:00Z")),
            PodDoNotDisrupt::Inactive
        );
    }

    #[test]
    fn a_scan_names_the_blocking_pod_and_the_invalid_values() {
        let mut finished = annotated("true", None);
        finished.status =
            Some(serde_json::from_value(json!({"phase": "Succeeded"})).expect("status"));
        let mut invalid = annotated("always", None);
        invalid.metadata.name = Some("q".into());
        let now = at("2026-11-22T00:00:00Z");
        assert_eq!(
            scan_pods(&[finished.clone()], now),
            PodsDoNotDisrupt::default()
        );
        assert_eq!(
            scan_pods(&[finished, invalid, annotated("true", None)], now),
            PodsDoNotDisrupt {
                blocking: Some("default/p".into()),
                invalid: vec![("default/q".into(), "always".into())],
            }
        );
    }

    #[test]
    fn nodes_and_claims_honour_only_true() {
        let node = |v: &str| -> Node {
            serde_json::from_value(
                json!({"metadata": {"name": "n", "annotations": {DO_NOT_DISRUPT: v}}}),
            )
            .expect("node")
        };
        let claim = |v: &str| claim(json!({"metadata": {"annotations": {DO_NOT_DISRUPT: v}}}));
        assert!(node_do_not_disrupt(Some(&node("true")), None));
        assert!(!node_do_not_disrupt(Some(&node("1h")), None));
        assert!(node_do_not_disrupt(None, Some(&claim("true"))));
        // Once the Node exists, its annotation decides.
        assert!(!node_do_not_disrupt(
            Some(&node("false")),
            Some(&claim("true"))
        ));
        assert!(!node_do_not_disrupt(None, None));
    }
}
