//! The `DisruptionAllowed` condition of a NodePool: whether its budgets let disruption take a node now, for
//! every reason, and in words which budget binds and when that changes. Users misread budgets (an inactive
//! budget means unlimited, the number is per reason, a window's end is easy to get wrong), so the condition
//! spells out what the disruption controller will do. Pure: the counts and the time are arguments.

use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::disruption::{count_nodes, Budgets, NodeState, PoolCounts};
use crate::engine::disruption_input::is_tainted_disrupted;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The condition type: kerf's own, next to Karpenter's conditions.
pub const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";
/// True: every reason may disrupt at least one node.
pub const BUDGETS_ALLOW: &str = "BudgetsAllow";
/// True: nothing to disrupt (budgets on an empty pool round to 0, which is no block).
pub const NO_NODES: &str = "NoNodes";
/// False: an active budget allows no node for at least one reason.
pub const BLOCKED_BY_BUDGET: &str = "BlockedByBudget";
/// False: a budget cannot be evaluated, which blocks every reason until it is fixed.
pub const INVALID_BUDGET: &str = "InvalidBudget";

/// The condition of one pool at one instant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetCondition {
    pub allowed: bool,
    pub reason: &'static str,
    /// One explanation per reason, `; `-separated, in the order the methods run.
    pub message: String,
    /// The next instant a budget window opens or closes: the condition must be evaluated again then, even
    /// when nothing else in the cluster changes.
    pub until: Option<Timestamp>,
}

/// The condition of `pool` with `counts` nodes at `now`.
pub fn budget_condition(pool: &NodePool, counts: PoolCounts, now: Timestamp) -> BudgetCondition {
    let budgets = Budgets::of(pool);
    let explanations = budgets.explain_all(counts, now);
    let until = explanations.iter().filter_map(|e| e.until).min();
    let lines: Vec<String> = explanations.iter().map(ToString::to_string).collect();
    let mut message = lines.join("; ");
    let (allowed, reason) = if !budgets.errors().is_empty() {
        (false, INVALID_BUDGET)
    } else if counts.total == 0 {
        message = format!("no initialized nodes to disrupt; {message}");
        (true, NO_NODES)
    } else if explanations.iter().any(|e| e.allowance.allowed.is_zero()) {
        (false, BLOCKED_BY_BUDGET)
    } else {
        (true, BUDGETS_ALLOW)
    };
    BudgetCondition {
        allowed,
        reason,
        message,
        until,
    }
}

/// The budget counts of every pool, from its NodeClaims (labelled with the pool) and their Nodes, as the
/// disruption controller counts them: a Node tainted `karpenter.sh/disrupted` is queued.
pub fn pool_counts<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
    nodes: &HashMap<&str, &Node>,
) -> BTreeMap<String, PoolCounts> {
    count_nodes(claims.into_iter().filter_map(|claim| {
        let pool = claim.metadata.labels.as_ref()?.get(labels::NODEPOOL)?;
        let node = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .and_then(|name| nodes.get(name).copied());
        let queued = node.is_some_and(is_tainted_disrupted);
        Some((pool.as_str(), NodeState::of(claim, node, queued)))
    }))
}

/// How long the status loop may wait for a cluster change before it must look again: until the earliest
/// budget window change (`next_change`), at most `resync` (which also retries failed writes), and at least
/// `min` so a clock that disagrees with the window cannot spin the loop.
pub fn wait_before_next_pass(
    now: Timestamp,
    next_change: Option<Timestamp>,
    resync: Duration,
    min: Duration,
) -> Duration {
    // A change already past (the clock stepped) converts to no duration: look again at once, after `min`.
    let until_change = next_change.map_or(resync, |t| {
        Duration::try_from(t.duration_since(now)).unwrap_or(Duration::ZERO)
    });
    until_change.clamp(min, resync.max(min))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn pool(budgets: serde_json::Value) -> NodePool {
        kerf_testkit::nodepool("p", json!({"disruption": {"budgets": budgets}}))
    }

    fn business_hours() -> NodePool {
        pool(json!([
            {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Drifted"]},
            {"nodes": "2"}
        ]))
    }

    const FOUR: PoolCounts = PoolCounts {
        total: 4,
        disrupting: 0,
    };

    #[test]
    fn a_closed_window_is_false_and_names_the_budget_and_when_it_opens() {
        // Monday 2026-11-23, 10:00 UTC: inside the 09:00–17:00 window.
        let c = budget_condition(&business_hours(), FOUR, at("2026-11-23T10:00:00Z"));
        assert!(!c.allowed);
        assert_eq!(c.reason, BLOCKED_BY_BUDGET);
        assert_eq!(
            c.message,
            "Empty: 2 allowed (budgets[1] active: nodes \"2\"); \
             Drifted: 0 allowed until 2026-11-23T17:00:00Z, then 2 (budgets[0] active: nodes \"0\", \
             schedule \"0 9 * * mon-fri\" for 8h, reasons [Drifted]); \
             Underutilized: 2 allowed (budgets[1] active: nodes \"2\")"
        );
        assert_eq!(c.until, Some(at("2026-11-23T17:00:00Z")));
    }

    #[test]
    fn after_the_window_it_is_true_until_the_next_one_opens() {
        let c = budget_condition(&business_hours(), FOUR, at("2026-11-23T17:00:00Z"));
        assert!(c.allowed);
        assert_eq!(c.reason, BUDGETS_ALLOW);
        assert!(
            c.message.contains(
                "Drifted: 2 allowed until 2026-11-24T09:00:00Z, then 0 (budgets[1] active"
            ),
            "{}",
            c.message
        );
        assert_eq!(c.until, Some(at("2026-11-24T09:00:00Z")));
    }

    #[test]
    fn nodes_already_disrupting_do_not_make_it_false() {
        let busy = PoolCounts {
            total: 4,
            disrupting: 2,
        };
        let c = budget_condition(&business_hours(), busy, at("2026-11-22T10:00:00Z"));
        assert!(c.allowed);
        assert!(
            c.message
                .starts_with("Empty: 2 allowed, 2 already disrupting, so 0 more"),
            "{}",
            c.message
        );
    }

    #[test]
    fn an_unscheduled_zero_blocks_with_no_change_ahead() {
        let c = budget_condition(
            &pool(json!([{"nodes": "0"}])),
            FOUR,
            at("2026-11-23T10:00:00Z"),
        );
        assert_eq!(
            (c.allowed, c.reason, c.until),
            (false, BLOCKED_BY_BUDGET, None)
        );
    }

    #[test]
    fn an_empty_pool_is_not_reported_as_blocked() {
        let c = budget_condition(
            &pool(json!([{"nodes": "10%"}])),
            PoolCounts::default(),
            at("2026-11-23T10:00:00Z"),
        );
        assert_eq!((c.allowed, c.reason), (true, NO_NODES));
        assert!(c
            .message
            .starts_with("no initialized nodes to disrupt; Empty: 0 allowed"));
    }

    #[test]
    fn an_invalid_budget_is_false_even_on_an_empty_pool() {
        let invalid =
            pool(json!([{"nodes": "0", "schedule": "0 0 * * sat-sun", "duration": "1h"}]));
        let c = budget_condition(&invalid, PoolCounts::default(), at("2026-11-23T10:00:00Z"));
        assert_eq!(
            (c.allowed, c.reason, c.until),
            (false, INVALID_BUDGET, None)
        );
        assert!(c.message.contains("invalid cron"), "{}", c.message);
    }

    #[test]
    fn the_loop_wakes_at_the_next_window_change_within_bounds() {
        let now = at("2026-11-23T16:59:30Z");
        let resync = Duration::from_secs(300);
        let min = Duration::from_secs(1);
        let wait = |next| wait_before_next_pass(now, next, resync, min);
        assert_eq!(
            wait(Some(at("2026-11-23T17:00:00Z"))),
            Duration::from_secs(30)
        );
        assert_eq!(wait(Some(at("2026-11-24T09:00:00Z"))), resync);
        assert_eq!(wait(None), resync);
        // A change in the past (a clock step) must not spin the loop.
        assert_eq!(wait(Some(at("2026-11-23T16:00:00Z"))), min);
    }

    fn claim(pool: &str, node: &str) -> NodeClaim {
        kerf_testkit::nodeclaim(
            node,
            json!({
                "metadata": { "labels": {"karpenter.sh/nodepool": pool}},
                "status": {"nodeName": node, "conditions": [
                    {"type": "Initialized", "status": "True", "reason": "Initialized", "message": "",
                     "lastTransitionTime": "2026-11-23T00:00:00Z"}]}
            }),
        )
    }

    fn node(name: &str, taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("a valid Node")
    }

    #[test]
    fn counts_follow_the_claims_and_treat_a_disrupted_taint_as_disrupting() {
        let claims = [claim("a", "n1"), claim("a", "n2"), claim("b", "n3")];
        let n1 = node("n1", json!([]));
        let n2 = node(
            "n2",
            json!([{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]),
        );
        let nodes = HashMap::from([("n1", &n1), ("n2", &n2)]);
        let counts = pool_counts(&claims, &nodes);
        assert_eq!(
            counts.get("a"),
            Some(&PoolCounts {
                total: 2,
                disrupting: 1
            })
        );
        // n3 has no Node: initialized but not Ready, so disrupting.
        assert_eq!(
            counts.get("b"),
            Some(&PoolCounts {
                total: 1,
                disrupting: 1
            })
        );
    }
}
