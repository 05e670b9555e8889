//! The NodePools a disruption pass found blocked by their budgets, as Karpenter reports them: for each voluntary
//! method that ran with candidates (`Decision::budgets_checked`), every NodePool with nodes whose budgets allow
//! that reason no disruption (Karpenter v1.14.1 `BuildDisruptionBudgetMapping`, which publishes
//! `NodePoolBlockedForDisruptionReason` while it works out a method's budgets). The controller publishes each as a
//! `DisruptionBlocked` Event on the NodePool, `kerf simulate` as a `blocked` entry of its timeline.

use crate::api::nodepool::NodePool;
use crate::disruption::{Binding, Budgets, Decision, Explanation, PoolCounts, Reason};
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// Reason of the Event on a NodePool whose budgets allow a method no disruption.
pub const DISRUPTION_BLOCKED: &str = "DisruptionBlocked";

/// A NodePool that may disrupt none of its nodes for `reason`, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockedPool {
    pub nodepool: String,
    pub reason: Reason,
    pub explanation: Explanation,
}

impl BlockedPool {
    /// Karpenter's Event message, then which budget binds and when the pool may disrupt again:
    /// `No allowed disruptions for disruption reason Empty due to blocking budget: budgets[0] active: nodes "0";
    /// 1 allowed from 2026-11-23T10:00:00Z`.
    pub fn message(&self) -> String {
        let karpenter = self
            .explanation
            .allowance
            .blocked_message()
            .unwrap_or_default();
        format!(
            "{karpenter}: {}; {}",
            self.explanation.binding(),
            self.reopening()
        )
    }

    /// When the pool may disrupt for the reason again, in words.
    pub fn reopening(&self) -> String {
        let e = &self.explanation;
        match (e.until, e.then, &e.allowance.binding) {
            (_, _, Binding::Invalid(_)) => "blocked until the budget is fixed".to_owned(),
            (Some(until), Some(then), _) if !then.is_zero() => {
                format!("{then} allowed from {until}")
            }
            (Some(until), _, _) => format!("the budgets change at {until} and still allow 0"),
            (None, _, _) => "no budget window opens or closes ahead".to_owned(),
        }
    }
}

/// The pools `decision`'s methods found blocked at `now`, given each pool's node counts: by reason in the order
/// the methods ran, then by pool in the order of `pools`. A pool without initialized nodes is never blocked.
pub fn of(
    decision: &Decision,
    pools: &[NodePool],
    counts: &BTreeMap<String, PoolCounts>,
    now: Timestamp,
) -> Vec<BlockedPool> {
    let mut blocked = Vec::new();
    for &reason in &decision.budgets_checked {
        let Some(budget_reason) = reason.budget_reason() else {
            continue;
        };
        for pool in pools {
            let name = pool.metadata.name.as_deref().unwrap_or_default();
            let Some(&pool_counts) = counts.get(name) else {
                continue;
            };
            let explanation = Budgets::of(pool).explain(budget_reason, pool_counts, now);
            if explanation.allowance.blocked_message().is_some() {
                blocked.push(BlockedPool {
                    nodepool: name.to_owned(),
                    reason,
                    explanation,
                });
            }
        }
    }
    blocked
}

#[cfg(test)]
mod tests;
