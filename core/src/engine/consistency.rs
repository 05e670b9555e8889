//! NodeClaim consistency (Karpenter's `nodeclaim.consistency` controller): every 10 minutes a launched claim's Node
//! is checked against what the claim expected of it. The one check is the node's shape: for every resource the
//! claim requests, a Node whose capacity is below 90% of the capacity the claim recorded at launch is an issue
//! (the instance is not what was paid for, or the kubelet misreports it). Each issue is a Warning
//! `FailedConsistencyCheck` Event on the claim; the claim's `ConsistentStateFound` condition is `True` while no check
//! finds one, `False` (`ConsistencyCheckFailed`) once one does.
//!
//! Pure: [`issues`] and [`conditions`] decide from the claim, its Node and the time.

use super::conditions::set;
use crate::api::condition::Condition;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::parse_quantity;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
/// Reason of the Event for each issue found.
pub const FAILED_CONSISTENCY_CHECK: &str = "FailedConsistencyCheck";
/// How often one claim is checked.
pub const SCAN_EVERY: Duration = Duration::from_secs(10 * 60);
/// A Node with less than this share of an expected resource is not the node the claim launched for.
const SHAPE_TOLERANCE: f64 = 0.90;

fn text(value: &IntOrString) -> String {
    match value {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

/// The node-shape issues of `claim`'s Node `node`, in Karpenter's words; none for a claim being deleted or not
/// initialized yet.
pub fn issues(claim: &NodeClaim, node: &Node) -> Vec<String> {
    if claim.metadata.deletion_timestamp.is_some()
        || !super::conditions::is_true(claim, "Initialized")
    {
        return Vec::new();
    }
    let requests = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    let expected = claim.status.as_ref().and_then(|s| s.capacity.as_ref());
    let found = node.status.as_ref().and_then(|s| s.capacity.as_ref());
    let mut issues = Vec::new();
    for (resource, requested) in requests.into_iter().flatten() {
        let Some(expected) = expected.and_then(|e| e.get(resource)) else {
            continue;
        };
        let requested = parse_quantity(&text(requested)).unwrap_or(0);
        let expected_milli = parse_quantity(&text(expected)).unwrap_or(0);
        if requested == 0 || expected_milli == 0 {
            continue;
        }
        let on_node = found.and_then(|f| f.get(resource));
        let node_milli = on_node.and_then(|q| parse_quantity(&q.0).ok()).unwrap_or(0);
        #[allow(clippy::cast_precision_loss)]
        let share = node_milli as f64 / expected_milli as f64;
        if share < SHAPE_TOLERANCE {
            issues.push(format!(
                "expected {} of resource {resource}, but found {} ({:.1}% of expected)",
                text(expected),
                on_node.map_or_else(|| "0".to_owned(), |q| q.0.clone()),
                share * 100.0
            ));
        }
    }
    issues
}

/// `claim`'s conditions with `ConsistentStateFound` brought in line with `issues` at `now`, or `None` when they
/// already are.
pub fn conditions(claim: &NodeClaim, issues: &[String], now: Timestamp) -> Option<Vec<Condition>> {
    let mut conditions = claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let current = conditions
        .iter()
        .find(|c| c.type_ == CONSISTENT_STATE_FOUND)
        .map(|c| c.status.as_str());
    match (issues.is_empty(), current) {
        (true, Some("True")) => return None,
        (true, _) => set(
            &mut conditions,
            CONSISTENT_STATE_FOUND,
            "True",
            CONSISTENT_STATE_FOUND,
            "",
            now,
        ),
        (false, Some("False")) => return None,
        (false, _) => set(
            &mut conditions,
            CONSISTENT_STATE_FOUND,
            "False",
            "ConsistencyCheckFailed",
            "Consistency Check Failed",
            now,
        ),
    }
    Some(conditions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(initialized: bool, deleting: bool) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c", "deletionTimestamp": deleting.then_some("2026-11-27T00:00:00Z")},
            "spec": {"nodeClassRef": {"group": "g", "kind": "k", "name": "n"}, "requirements": [],
                     "resources": {"requests": {"cpu": "1", "memory": "1Gi", "pods": "0"}}},
            "status": {"providerID": "aws:///a/i-1",
                       "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"},
                       "conditions": [{"type": "Initialized", "status": if initialized {"True"} else {"Unknown"},
                                       "reason": "x", "message": "", "lastTransitionTime": "2026-11-27T00:00:00Z"}]}
        }))
        .unwrap()
    }

    fn node(cpu: &str, memory: &str) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"},
            "status": {"capacity": {"cpu": cpu, "memory": memory, "pods": "58"}}}))
        .unwrap()
    }

    /// Karpenter's consistency suite: "should detect issues that launch with much fewer resources than expected"
    /// (its message), and the cases the node-shape check leaves alone (at least 90%, not initialized, deleting).
    #[test]
    fn a_node_below_nine_tenths_of_an_expected_requested_resource_is_an_issue() {
        assert!(issues(&claim(true, false), &node("4", "16Gi")).is_empty());
        assert!(issues(&claim(true, false), &node("3600m", "15Gi")).is_empty());
        assert_eq!(
            issues(&claim(true, false), &node("4", "8Gi")),
            ["expected 16Gi of resource memory, but found 8Gi (50.0% of expected)"]
        );
        assert_eq!(issues(&claim(true, false), &node("2", "16Gi")).len(), 1);
        assert!(issues(&claim(false, false), &node("2", "8Gi")).is_empty());
        assert!(issues(&claim(true, true), &node("2", "8Gi")).is_empty());
    }

    /// "should set consistent state found condition to true if there are no consistency issues", and `False` once
    /// an issue is found (the end of "should detect issues that launch ..."), each written once.
    #[test]
    fn the_condition_follows_the_issues() {
        let now: Timestamp = "2026-11-27T01:00:00Z".parse().unwrap();
        let mut fresh = claim(true, false);
        let healthy = conditions(&fresh, &[], now).expect("set");
        let found = healthy
            .iter()
            .find(|c| c.type_ == CONSISTENT_STATE_FOUND)
            .expect("condition");
        assert_eq!(found.status, "True");
        fresh.status.as_mut().unwrap().conditions = Some(healthy);
        assert!(conditions(&fresh, &[], now).is_none());
        let failing = conditions(&fresh, &["x".into()], now).expect("set");
        let found = failing
            .iter()
            .find(|c| c.type_ == CONSISTENT_STATE_FOUND)
            .expect("condition");
        assert_eq!(
            (found.status.as_str(), found.reason.as_str()),
            ("False", "ConsistencyCheckFailed")
        );
        fresh.status.as_mut().unwrap().conditions = Some(failing);
        assert!(conditions(&fresh, &["x".into()], now).is_none());
    }
}
