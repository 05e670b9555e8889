//! Whether PodDisruptionBudgets keep a node from being disrupted (controller-behaviour.md §3.2): for an
//! evictable pod, two or more matching PDBs (the eviction API refuses those), or a matching PDB with
//! `disruptionsAllowed == 0`, block. A not-Ready pod under `unhealthyPodEvictionPolicy: AlwaysAllow` does not.

use super::do_not_disrupt::pod_do_not_disrupt;
use super::pods::{is_active, is_mirror_pod, pod_key};
use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

pub use crate::api::well_known::DISRUPTED_TAINT;

/// Why PDBs block a node, naming the pod and the budgets.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PdbBlock {
    #[error("pod {pod:?} is matched by more than one pdb ({}): eviction refuses it", pdbs.join(", "))]
    MultiplePdbs { pod: String, pdbs: Vec<String> },
    #[error("pdb {pdb:?} prevents pod evictions (pod {pod:?})")]
    NoDisruptionsAllowed { pod: String, pdb: String },
}

/// The first PDB block among `pods` (those of one node), if any.
pub fn pdb_block(pods: &[Pod], pdbs: &[PodDisruptionBudget], now: Timestamp) -> Option<PdbBlock> {
    pods.iter()
        .filter(|p| is_evictable(p, now))
        .find_map(|pod| block_of(pod, pdbs))
}

/// Pods that eviction would touch: active, not mirror pods, not tolerating the disrupted taint, and without
/// an active do-not-disrupt.
pub fn is_evictable(pod: &Pod, now: Timestamp) -> bool {
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default();
    is_active(pod)
        && !is_mirror_pod(pod)
        && !tolerations.iter().any(tolerates_disrupted_taint)
        && !pod_do_not_disrupt(pod, now).is_active()
}

/// Whether PDBs will never let `pod` be evicted however long the drain waits: two or more match it, or one
/// that is written to allow no disruption at all (`maxUnavailable: 0` or `0%`, `minAvailable: 100%`). A new
/// node would not help such a pod of a leaving node, so provisioning leaves it be (Karpenter's
/// `IsCurrentlyReschedulable`).
pub fn fully_blocked(pod: &Pod, pdbs: &[PodDisruptionBudget], now: Timestamp) -> bool {
    if !is_evictable(pod, now) {
        return false;
    }
    let matching = matching(pod, pdbs);
    if matching.len() > 1 {
        return true;
    }
    matching.first().is_some_and(|pdb| {
        let Some(spec) = pdb.spec.as_ref() else {
            return false;
        };
        let always_allow_unhealthy =
            spec.unhealthy_pod_eviction_policy.as_deref() == Some("AlwaysAllow");
        if always_allow_unhealthy && is_not_ready(pod) {
            return false;
        }
        let max_unavailable = spec.max_unavailable.as_ref();
        matches!(max_unavailable, Some(IntOrString::Int(0)))
            || matches!(max_unavailable, Some(IntOrString::String(s)) if s == "0%")
            || matches!(spec.min_available.as_ref(), Some(IntOrString::String(s)) if s == "100%")
    })
}

/// The PDBs of `pod`'s namespace that select it.
fn matching<'p>(pod: &Pod, pdbs: &'p [PodDisruptionBudget]) -> Vec<&'p PodDisruptionBudget> {
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    pdbs.iter()
        .filter(|pdb| pdb.metadata.namespace == pod.metadata.namespace)
        .filter(|pdb| selects(pdb.spec.as_ref().and_then(|s| s.selector.as_ref()), labels))
        .collect()
}

fn block_of(pod: &Pod, pdbs: &[PodDisruptionBudget]) -> Option<PdbBlock> {
    let matching = matching(pod, pdbs);
    let name = |pdb: &PodDisruptionBudget| {
        format!(
            "{}/{}",
            pdb.metadata.namespace.as_deref().unwrap_or("default"),
            pdb.metadata.name.as_deref().unwrap_or_default()
        )
    };
    if matching.len() > 1 {
        return Some(PdbBlock::MultiplePdbs {
            pod: pod_key(pod),
            pdbs: matching.iter().map(|p| name(p)).collect(),
        });
    }
    let pdb = matching.first()?;
    let always_allow_unhealthy = pdb
        .spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
        == Some("AlwaysAllow");
    if always_allow_unhealthy && !is_ready(pod) {
        return None;
    }
    // A PDB its controller has not processed yet reads as 0, as in Karpenter.
    let allowed = pdb
        .status
        .as_ref()
        .and_then(|s| s.disruptions_allowed)
        .unwrap_or(0);
    (allowed == 0).then(|| PdbBlock::NoDisruptionsAllowed {
        pod: pod_key(pod),
        pdb: name(pdb),
    })
}

/// A pod whose `Ready` condition is `False` (Karpenter's test for an unhealthy pod under `AlwaysAllow`).
fn is_not_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "False"))
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a toleration covers `karpenter.sh/disrupted:NoSchedule` (Kubernetes' toleration rules).
fn tolerates_disrupted_taint(t: &Toleration) -> bool {
    let effect = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == "NoSchedule");
    let key = t.key.as_deref().unwrap_or_default();
    let key_and_value = match t.operator.as_deref() {
        Some("Exists") => key.is_empty() || key == DISRUPTED_TAINT,
        _ => key == DISRUPTED_TAINT && t.value.as_deref().unwrap_or_default().is_empty(),
    };
    effect && key_and_value
}

/// A policy/v1 selector: a null selector selects nothing, an empty one everything in the namespace.
fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let pairs_match = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    pairs_match
        && selector.match_expressions.iter().flatten().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::pod;
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-11-22T12:00:00Z";

    fn now() -> Timestamp {
        NOW.parse().expect("timestamp")
    }

    fn web(extra_spec: serde_json::Value, ready: bool) -> Pod {
        let mut spec = json!({"containers": []});
        if let (Some(s), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
            s.extend(extra.clone());
        }
        pod(json!({
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web", "tier": "front"}},
            "spec": spec,
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        }))
    }

    fn pdb(
        name: &str,
        selector: serde_json::Value,
        allowed: i32,
        policy: Option<&str>,
    ) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop"},
            "spec": {"selector": selector, "unhealthyPodEvictionPolicy": policy},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 1, "desiredHealthy": 1,
                "expectedPods": 1},
        }))
        .expect("pdb")
    }

    #[test]
    fn a_pdb_with_no_disruptions_allowed_blocks() {
        let p = web(json!({}), true);
        let zero = pdb("web", json!({"matchLabels": {"app": "web"}}), 0, None);
        assert_eq!(
            pdb_block(std::slice::from_ref(&p), &[zero], now()).map(|b| b.to_string()),
            Some("pdb \"shop/web\" prevents pod evictions (pod \"shop/web-1\")".to_owned())
        );
        let one = pdb("web", json!({"matchLabels": {"app": "web"}}), 1, None);
        assert_eq!(pdb_block(&[p], &[one], now()), None);
    }

    #[test]
    fn two_matching_pdbs_block_even_when_both_allow() {
        let p = web(json!({}), true);
        let a = pdb("a", json!({"matchLabels": {"app": "web"}}), 5, None);
        let b = pdb(
            "b",
            json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}),
            5,
            None,
        );
        assert!(matches!(
            pdb_block(&[p], &[a, b], now()),
            Some(PdbBlock::MultiplePdbs { pdbs, .. }) if pdbs == ["shop/a", "shop/b"]
        ));
    }

    #[test]
    fn selectors_namespaces_and_null_selectors() {
        let p = web(json!({}), true);
        let other_app = pdb("x", json!({"matchLabels": {"app": "db"}}), 0, None);
        let not_in = pdb(
            "y",
            json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
            0,
            None,
        );
        let null = pdb("z", json!(null), 0, None);
        assert_eq!(
            pdb_block(std::slice::from_ref(&p), &[other_app, not_in, null], now()),
            None
        );
        let everything = pdb("all", json!({}), 0, None);
        assert!(pdb_block(
            std::slice::from_ref(&p),
            std::slice::from_ref(&everything),
            now()
        )
        .is_some());
        let mut elsewhere = everything;
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(pdb_block(&[p], &[elsewhere], now()), None);
    }

    #[test]
    fn unhealthy_pods_under_always_allow_do_not_block() {
        let always = pdb(
            "web",
            json!({"matchLabels": {"app": "web"}}),
            0,
            Some("AlwaysAllow"),
        );
        assert_eq!(
            pdb_block(
                &[web(json!({}), false)],
                std::slice::from_ref(&always),
                now()
            ),
            None
        );
        assert!(pdb_block(&[web(json!({}), true)], &[always], now()).is_some());
        let if_healthy = pdb(
            "web",
            json!({"matchLabels": {"app": "web"}}),
            0,
            Some("IfHealthyBudget"),
        );
        assert!(pdb_block(&[web(json!({}), false)], &[if_healthy], now()).is_some());
    }

    #[test]
    fn pods_that_are_not_evicted_do_not_block() {
        let zero = [pdb("web", json!({"matchLabels": {"app": "web"}}), 0, None)];
        let tolerating = [
            json!({"key": DISRUPTED_TAINT, "operator": "Exists", "effect": "NoSchedule"}),
            json!({"key": DISRUPTED_TAINT}),
            json!({"operator": "Exists"}),
        ];
        for t in tolerating {
            let p = web(json!({"tolerations": [t]}), true);
            assert_eq!(pdb_block(&[p], &zero, now()), None, "{t}");
        }
        let not_tolerating = web(
            json!({"tolerations": [
            {"key": DISRUPTED_TAINT, "operator": "Exists", "effect": "NoExecute"}]}),
            true,
        );
        assert!(pdb_block(&[not_tolerating], &zero, now()).is_some());
        let mut protected = web(json!({}), true);
        protected.metadata.annotations = Some(BTreeMap::from([(
            "karpenter.sh/do-not-disrupt".into(),
            "true".into(),
        )]));
        assert_eq!(pdb_block(&[protected], &zero, now()), None);
        let mut finished = web(json!({}), true);
        if let Some(s) = finished.status.as_mut() {
            s.phase = Some("Succeeded".into());
        }
        assert_eq!(pdb_block(&[finished], &zero, now()), None);
    }

    /// A PDB over `app: web` in `shop` with the given `spec` members.
    fn pdb_spec(name: &str, spec: serde_json::Value) -> PodDisruptionBudget {
        let mut full = json!({"selector": {"matchLabels": {"app": "web"}}});
        if let (Some(s), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
            s.extend(extra.clone());
        }
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "shop"}, "spec": full}),
        )
        .expect("pdb")
    }

    /// Karpenter's "should not reschedule pods from a deleting node when pods are blocked due to fully blocking
    /// PDBs" table, and what is not fully blocking.
    #[test]
    fn fully_blocking_budgets() {
        let cases = [
            (
                "maxUnavailable 0",
                vec![json!({"maxUnavailable": 0})],
                true,
                true,
            ),
            (
                "maxUnavailable 0%",
                vec![json!({"maxUnavailable": "0%"})],
                true,
                true,
            ),
            (
                "minAvailable 100%",
                vec![json!({"minAvailable": "100%"})],
                true,
                true,
            ),
            (
                "two PDBs",
                vec![json!({"maxUnavailable": 1}), json!({"maxUnavailable": 1})],
                true,
                true,
            ),
            (
                "maxUnavailable 1",
                vec![json!({"maxUnavailable": 1})],
                true,
                false,
            ),
            (
                "minAvailable 1",
                vec![json!({"minAvailable": 1})],
                true,
                false,
            ),
            (
                "unhealthy pod under AlwaysAllow",
                vec![json!({"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow"})],
                false,
                false,
            ),
            (
                "healthy pod under AlwaysAllow",
                vec![json!({"maxUnavailable": 0, "unhealthyPodEvictionPolicy": "AlwaysAllow"})],
                true,
                true,
            ),
        ];
        for (what, specs, ready, blocked) in cases {
            let pdbs: Vec<PodDisruptionBudget> = specs
                .into_iter()
                .enumerate()
                .map(|(i, spec)| pdb_spec(&format!("pdb-{i}"), spec))
                .collect();
            assert_eq!(
                fully_blocked(&web(json!({}), ready), &pdbs, now()),
                blocked,
                "{what}"
            );
        }
        // A pod eviction would not touch (it tolerates the disrupted taint) is never blocked.
        let tolerating = web(json!({"tolerations": [{"operator": "Exists"}]}), true);
        let zero = [pdb_spec("zero", json!({"maxUnavailable": 0}))];
        assert!(!fully_blocked(&tolerating, &zero, now()));
    }
}
