//! What one drain pass of a node does, decided purely (controller-behaviour.md §4.2): which pods to evict now (only
//! the first non-empty tier: non-critical non-DaemonSet, non-critical DaemonSet, critical non-DaemonSet,
//! critical DaemonSet), which to delete because the termination deadline is upon them, and whether the node
//! is drained. Terminal and mirror pods, pods that tolerate `karpenter.sh/disrupted` and pods stuck
//! terminating are not waited for; pods with an active `karpenter.sh/do-not-disrupt` are, until the
//! deadline.

use crate::disruption::{is_daemonset_pod, is_mirror_pod, pod_do_not_disrupt, DISRUPTED_TAINT};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::sync::Arc;

/// A pod still terminating this long after its deletion time is not waited for (its kubelet is gone).
const STUCK_TERMINATING: SignedDuration = SignedDuration::from_secs(60);
/// Priority classes whose pods go last.
const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];
/// A pod deleted at the deadline gets at least this much grace.
const MIN_FORCED_GRACE: i64 = 1;

/// One pass of a drain.
#[derive(Clone, Debug, Default)]
pub struct DrainPass {
    /// Evict these (the first tier with pods to wait for).
    pub evict: Vec<Arc<Pod>>,
    /// Delete these now, bypassing PDBs and do-not-disrupt, with this grace period in seconds.
    pub delete: Vec<(Arc<Pod>, i64)>,
    /// Pods the node still waits for (evicted ones included); zero means drained.
    pub waiting: usize,
}

impl DrainPass {
    pub fn drained(&self) -> bool {
        self.waiting == 0
    }
}

/// The pass over the pods bound to a node, at `now`, with the claim's termination `deadline` if it has one.
pub fn drain_pass(pods: &[Arc<Pod>], now: Timestamp, deadline: Option<Timestamp>) -> DrainPass {
    let drainable: Vec<&Arc<Pod>> = pods
        .iter()
        .filter(|p| is_waiting_eviction(p, now))
        .collect();
    let mut pass = DrainPass {
        waiting: drainable.len(),
        ..DrainPass::default()
    };
    let mut remaining = Vec::new();
    for pod in drainable {
        match deadline.and_then(|d| forced_grace(pod, now, d)) {
            Some(grace) => pass.delete.push((pod.clone(), grace)),
            None => remaining.push(pod),
        }
    }
    let Some(first) = remaining.iter().map(|p| tier(p)).min() else {
        return pass;
    };
    pass.evict = remaining
        .into_iter()
        .filter(|p| tier(p) == first)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !pod_do_not_disrupt(p, now).is_active())
        .cloned()
        .collect();
    pass
}

/// Whether the drain waits for `pod` (Karpenter's `IsWaitingEviction`): a drainable pod that is not terminal.
fn is_waiting_eviction(pod: &Pod, now: Timestamp) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let terminal = matches!(phase, Some("Succeeded" | "Failed"));
    !terminal && is_drainable(pod, now)
}

/// Whether a drain moves `pod` off its node (Karpenter's `IsDrainable`): it does not tolerate
/// `karpenter.sh/disrupted`, is not stuck terminating and is not a mirror pod. Terminal pods count as drainable
/// (the volumes they claim are detached before the instance goes), they are just not waited for.
pub fn is_drainable(pod: &Pod, now: Timestamp) -> bool {
    let stuck = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| now.duration_since(t.0) > STUCK_TERMINATING);
    !stuck && !is_mirror_pod(pod) && !tolerates_disrupted(pod)
}

/// A toleration that matches `karpenter.sh/disrupted:NoSchedule` (tolerate-everything included).
fn tolerates_disrupted(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let key_matches = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(key) => key == DISRUPTED_TAINT,
            };
            let effect_matches =
                matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
            key_matches && effect_matches
        })
}

/// 0: non-critical non-DaemonSet, 1: non-critical DaemonSet, 2: critical non-DaemonSet, 3: critical
/// DaemonSet.
fn tier(pod: &Pod) -> u8 {
    let critical = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority_class_name.as_deref())
        .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c));
    u8::from(critical) * 2 + u8::from(is_daemonset_pod(pod))
}

/// The grace period to delete `pod` with, when the deadline leaves it no time for a graceful eviction:
/// `now` is past `deadline - terminationGracePeriodSeconds`, or the pod is terminating past the deadline.
fn forced_grace(pod: &Pod, now: Timestamp, deadline: Timestamp) -> Option<i64> {
    let pod_grace = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
        .unwrap_or(30);
    let latest_start = deadline - SignedDuration::from_secs(pod_grace);
    let terminating_past_deadline = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_some_and(|t| t.0 > deadline);
    if now > latest_start || terminating_past_deadline {
        Some(deadline.duration_since(now).as_secs().max(MIN_FORCED_GRACE))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn pod(name: &str, extra: Value) -> Arc<Pod> {
        let mut value = json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"containers": [], "terminationGracePeriodSeconds": 30},
            "status": {"phase": "Running"},
        });
        merge(&mut value, extra);
        Arc::new(serde_json::from_value(value).expect("pod"))
    }

    fn merge(base: &mut Value, patch: Value) {
        if let (Some(b), Value::Object(p)) = (base.as_object_mut(), &patch) {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v.clone());
            }
        } else {
            *base = patch;
        }
    }

    fn daemon() -> Value {
        json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]}})
    }

    fn critical() -> Value {
        json!({"spec": {"priorityClassName": "system-node-critical"}})
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
        pods.iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or_default())
            .collect()
    }

    #[test]
    fn tiers_go_one_at_a_time_plain_pods_first_critical_daemons_last() {
        let now = at("2026-11-23T00:00:00Z");
        let mut critical_daemon = daemon();
        merge(&mut critical_daemon, critical());
        let mut pods = vec![
            pod("critical-daemon", critical_daemon),
            pod("critical", critical()),
            pod("daemon", daemon()),
            pod("plain", json!({})),
        ];
        let mut order = Vec::new();
        while !pods.is_empty() {
            let pass = drain_pass(&pods, now, None);
            assert_eq!(pass.waiting, pods.len());
            assert!(pass.delete.is_empty());
            let evicted = names(&pass.evict).join(",");
            pods.retain(|p| {
                !pass
                    .evict
                    .iter()
                    .any(|e| e.metadata.name == p.metadata.name)
            });
            order.push(evicted);
        }
        assert_eq!(order, ["plain", "daemon", "critical", "critical-daemon"]);
        assert!(drain_pass(&[], now, None).drained());
    }

    #[test]
    fn terminal_mirror_tolerating_and_stuck_pods_are_not_waited_for() {
        let now = at("2026-11-23T00:10:00Z");
        let pods = vec![
            pod("done", json!({"status": {"phase": "Succeeded"}})),
            pod(
                "mirror",
                json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}),
            ),
            pod(
                "tolerates-all",
                json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
            ),
            pod(
                "tolerates-disrupted",
                json!({"spec": {"tolerations": [
                {"key": "karpenter.sh/disrupted", "operator": "Exists", "effect": "NoSchedule"}]}}),
            ),
            pod(
                "stuck",
                json!({"metadata": {"deletionTimestamp": "2026-11-23T00:08:00Z"}}),
            ),
        ];
        let pass = drain_pass(&pods, now, None);
        assert!(pass.drained(), "{pass:?}");
        assert!(pass.evict.is_empty());
    }

    #[test]
    fn terminating_and_do_not_disrupt_pods_are_waited_for_but_not_evicted_again() {
        let now = at("2026-11-23T00:00:00Z");
        let pods = vec![
            pod(
                "terminating",
                json!({"metadata": {"deletionTimestamp": "2026-11-23T00:00:20Z"}}),
            ),
            pod(
                "pinned",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}),
            ),
            pod("daemon", daemon()),
        ];
        let pass = drain_pass(&pods, now, None);
        assert_eq!(pass.waiting, 3);
        assert!(pass.evict.is_empty(), "the daemon waits for the first tier");
    }

    #[test]
    fn the_deadline_deletes_what_it_leaves_no_time_for_from_every_tier() {
        let deadline = at("2026-11-23T01:00:00Z");
        let pods = vec![
            pod(
                "pinned",
                json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}},
                                  "spec": {"terminationGracePeriodSeconds": 600}}),
            ),
            pod("daemon", daemon()),
            pod(
                "quick",
                json!({"spec": {"terminationGracePeriodSeconds": 10}}),
            ),
        ];
        let early = drain_pass(&pods, at("2026-11-23T00:40:00Z"), Some(deadline));
        assert!(early.delete.is_empty());
        assert_eq!(names(&early.evict), ["quick"]);
        let late = drain_pass(&pods, at("2026-11-23T00:51:00Z"), Some(deadline));
        let deleted: Vec<(&str, i64)> = late
            .delete
            .iter()
            .map(|(p, g)| (p.metadata.name.as_deref().unwrap_or_default(), *g))
            .collect();
        assert_eq!(deleted, [("pinned", 540)]);
        assert_eq!(names(&late.evict), ["quick"]);
        let past = drain_pass(&pods, at("2026-11-23T01:00:05Z"), Some(deadline));
        assert_eq!(past.delete.len(), 3);
        assert!(past.delete.iter().all(|(_, grace)| *grace == 1));
        assert!(past.evict.is_empty());
    }
}
