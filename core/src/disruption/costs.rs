//! The costs that order disruption candidates and decide emptiness (controller-behaviour.md §3.2).

use super::lifetime::{lifetime_from, LifetimeError};
use super::pods::is_reschedulable;
use crate::api::nodeclaim::NodeClaim;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

/// `controller.kubernetes.io/pod-deletion-cost`.
pub const POD_DELETION_COST: &str = "controller.kubernetes.io/pod-deletion-cost";

/// `clamp(1 + deletionCost/2^27 + priority/2^25, −10, 10)`. An unparseable deletion cost is ignored.
pub fn eviction_cost(pod: &Pod) -> f64 {
    let deletion_cost = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(POD_DELETION_COST))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|c| c.is_finite())
        .unwrap_or(0.0);
    let priority = pod
        .spec
        .as_ref()
        .and_then(|s| s.priority)
        .map_or(0.0, f64::from);
    (1.0 + deletion_cost / 2f64.powi(27) + priority / 2f64.powi(25)).clamp(-10.0, 10.0)
}

/// The share of the claim's life left at `now`: `clamp((expireAfter − age) / expireAfter, 0, 1)`; 1 for
/// `Never`.
pub fn lifetime_remaining(claim: &NodeClaim, now: Timestamp) -> Result<f64, LifetimeError> {
    let Some((total, age)) = lifetime_and_age(claim, now)? else {
        return Ok(1.0);
    };
    if total <= 0.0 {
        return Ok(0.0);
    }
    Ok(((total - age) / total).clamp(0.0, 1.0))
}

/// The claim's `expireAfter` and its age at `now`, in seconds; `None` for `Never`.
fn lifetime_and_age(
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<Option<(f64, f64)>, LifetimeError> {
    Ok(lifetime_from(claim)?.map(|(lifetime, created)| {
        (
            lifetime.as_secs_f64(),
            now.duration_since(created).as_secs_f64(),
        )
    }))
}

/// `Σ EvictionCost × lifetime remaining` over the node's reschedulable pods: cheaper for nodes close to expiry.
pub fn disruption_cost(
    pods: &[Pod],
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<f64, LifetimeError> {
    Ok(eviction_sum(pods) * lifetime_remaining(claim, now)?)
}

/// How fast [`disruption_cost`] falls at `now`, per second: `Σ EvictionCost / expireAfter` between the claim's
/// creation and its expiry, where the lifetime share falls linearly; 0 outside them (the share is clamped) and
/// for `Never`.
pub fn disruption_cost_fall(
    pods: &[Pod],
    claim: &NodeClaim,
    now: Timestamp,
) -> Result<f64, LifetimeError> {
    let Some((total, age)) = lifetime_and_age(claim, now)? else {
        return Ok(0.0);
    };
    Ok(if total > 0.0 && (0.0..total).contains(&age) {
        eviction_sum(pods) / total
    } else {
        0.0
    })
}

fn eviction_sum(pods: &[Pod]) -> f64 {
    pods.iter()
        .filter(|p| is_reschedulable(p))
        .map(eviction_cost)
        .sum()
}

/// `1 + Σ max(0, EvictionCost)` over the node's reschedulable pods.
pub fn reschedule_cost(pods: &[Pod]) -> f64 {
    1.0 + pods
        .iter()
        .filter(|p| is_reschedulable(p))
        .map(|p| eviction_cost(p).max(0.0))
        .sum::<f64>()
}

/// A node is empty when its `RescheduleCost` is at most 1: DaemonSet, mirror and finished pods do not count,
/// nor do pods whose eviction costs nothing.
pub fn is_empty(pods: &[Pod]) -> bool {
    reschedule_cost(pods) <= 1.0
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::created_claim as claim;
    use super::super::fixtures::pod;
    use super::*;
    use serde_json::json;

    fn costed(deletion_cost: Option<&str>, priority: Option<i32>) -> Pod {
        let annotations = deletion_cost.map(|c| json!({POD_DELETION_COST: c}));
        pod(
            json!({"metadata": {"name": "p", "annotations": annotations},
            "spec": {"containers": [], "priority": priority}}),
        )
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn eviction_cost_follows_deletion_cost_and_priority_within_clamps() {
        assert_eq!(eviction_cost(&costed(None, None)), 1.0);
        assert_eq!(eviction_cost(&costed(Some("134217728"), None)), 2.0); // 2^27
        assert_eq!(eviction_cost(&costed(None, Some(33_554_432))), 2.0); // 2^25
        assert_eq!(eviction_cost(&costed(None, Some(1_000_000_000))), 10.0);
        assert_eq!(
            eviction_cost(&costed(Some("-2147483647"), Some(i32::MIN))),
            -10.0
        );
        assert_eq!(eviction_cost(&costed(Some("not a number"), None)), 1.0);
        assert_eq!(eviction_cost(&costed(Some("NaN"), None)), 1.0);
    }

    #[test]
    fn emptiness_ignores_daemonset_mirror_and_finished_pods() {
        let ds = pod(json!({"metadata": {"name": "d", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": true}]}}));
        let mirror = pod(
            json!({"metadata": {"name": "m", "annotations": {"kubernetes.io/config.mirror": "x"}}}),
        );
        let done = pod(json!({"metadata": {"name": "j"}, "status": {"phase": "Succeeded"}}));
        assert!(is_empty(&[]));
        assert!(is_empty(&[ds.clone(), mirror, done]));
        assert!(!is_empty(&[ds, costed(None, None)]));
        // A pod whose eviction costs nothing does not make the node non-empty.
        let worthless = costed(Some("-134217728"), None);
        assert_eq!(eviction_cost(&worthless), 0.0);
        assert!(is_empty(&[worthless]));
        assert_eq!(
            reschedule_cost(&[costed(None, None), costed(None, None)]),
            3.0
        );
    }

    #[test]
    fn disruption_cost_shrinks_with_the_remaining_lifetime() {
        let c = claim("2026-11-01T00:00:00Z", Some("100h"), json!({}));
        let pods = [costed(None, None), costed(None, None)];
        assert_eq!(
            disruption_cost(&pods, &c, at("2026-11-01T00:00:00Z")),
            Ok(2.0)
        );
        assert_eq!(
            disruption_cost(&pods, &c, at("2026-11-03T02:00:00Z")),
            Ok(1.0)
        ); // 50h
        assert_eq!(
            disruption_cost(&pods, &c, at("2026-12-01T00:00:00Z")),
            Ok(0.0)
        );
        let never = claim("2026-11-01T00:00:00Z", Some("Never"), json!({}));
        assert_eq!(
            disruption_cost(&pods, &never, at("2030-01-01T00:00:00Z")),
            Ok(2.0)
        );
    }
}
