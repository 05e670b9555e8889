//! The budgets of one method in one pass (controller-behaviour.md §3.6): evaluated once per pool for the
//! method's reason, then used up one node at a time.

use super::super::budgets::{count_nodes, Allowance, Budgets, NodeState, PoolCounts};
use super::super::command::Why;
use super::facts::Facts;
use crate::api::nodepool::DisruptionReason;
use k8s_openapi::jiff::Timestamp;
use std::collections::BTreeMap;

/// Every pool's parsed budgets and node counts.
pub(crate) struct Ledger {
    pools: BTreeMap<String, (Budgets, PoolCounts)>,
    now: Timestamp,
}

impl Ledger {
    /// Counts nodes over `facts`; expired nodes count as disrupting, since expiration deletes them now.
    pub fn new(facts: &[Facts<'_>], now: Timestamp) -> Self {
        let counts = count_nodes(facts.iter().map(|f| {
            let state = NodeState::of(
                &f.input.claim,
                f.input.node.as_deref(),
                f.input.queued || f.expired,
            );
            (f.target.nodepool.as_str(), state)
        }));
        let pools = facts
            .iter()
            .filter_map(|f| f.pool)
            .map(|pool| {
                let name = pool.metadata.name.clone().unwrap_or_default();
                let counts = counts.get(&name).copied().unwrap_or_default();
                (name, (Budgets::of(pool), counts))
            })
            .collect();
        Ledger { pools, now }
    }

    /// The allowances of every pool for `reason`, to be used up by one method.
    pub fn for_reason(&self, reason: DisruptionReason) -> Allowances {
        Allowances {
            by_pool: self
                .pools
                .iter()
                .map(|(name, (budgets, counts))| {
                    (
                        name.clone(),
                        (budgets.evaluate(reason, *counts, self.now), 0),
                    )
                })
                .collect(),
        }
    }
}

/// What each pool still allows one method.
#[derive(Clone, Debug)]
pub(crate) struct Allowances {
    /// The allowance as evaluated, and how many nodes the method has taken since.
    by_pool: BTreeMap<String, (Allowance, u64)>,
}

impl Allowances {
    /// Whether `pool` allows one more node, without using it.
    pub fn check(&self, pool: &str) -> Result<(), Why> {
        match self.by_pool.get(pool) {
            Some((a, used)) if a.budget.minus(*used).is_zero() => Err(Why::Budget {
                message: format!(
                    "NodePool {pool:?} allows no more disruptions for reason {:?} now ({} allowed, {} disrupting)",
                    a.reason, a.allowed, a.disrupting + used
                ),
            }),
            Some(_) => Ok(()),
            None => Err(Why::UnknownNodePool(pool.to_owned())),
        }
    }

    /// Uses one node of `pool`'s budget.
    pub fn take(&mut self, pool: &str) -> Result<(), Why> {
        self.check(pool)?;
        if let Some((_, used)) = self.by_pool.get_mut(pool) {
            *used += 1;
        }
        Ok(())
    }

    /// The allowances of `pools` as evaluated at the start of the method, for a command's record.
    pub fn evaluated<'p>(&self, pools: impl IntoIterator<Item = &'p str>) -> Vec<Allowance> {
        let mut names: Vec<&str> = pools.into_iter().collect();
        names.sort_unstable();
        names.dedup();
        names
            .into_iter()
            .filter_map(|p| self.by_pool.get(p).map(|(a, _)| a.clone()))
            .collect()
    }
}
