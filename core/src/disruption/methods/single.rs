//! Single-node consolidation (controller-behaviour.md §3.4): candidates in consolidation order, interleaved
//! across pools so that one pool's nodes do not starve another's; the first that can be deleted or replaced by
//! a cheaper node wins.

use super::super::command::{Command, Method};
use super::consolidation::{candidate, consolidate, order};
use super::Pass;
use crate::api::nodepool::DisruptionReason;
use std::collections::BTreeMap;

pub(crate) fn commands(pass: &mut Pass<'_>) -> Vec<Command> {
    let method = Method::SingleNodeConsolidation;
    let budgets = pass.ledger.for_reason(DisruptionReason::Underutilized);
    let mut by_pool: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (index, f) in pass.facts.iter().enumerate() {
        // Multi-node, which ran before, already reported the nodes that are no candidates.
        if candidate(f) == Ok(true) {
            by_pool
                .entry(f.target.nodepool.clone())
                .or_default()
                .push(index);
        }
    }
    for list in by_pool.values_mut() {
        list.sort_by(|&a, &b| order(&pass.facts[a], &pass.facts[b]));
    }
    for index in interleave(by_pool.into_values().collect()) {
        if let Err(why) = budgets.check(&pass.facts[index].target.nodepool) {
            pass.skip(method, index, why);
            continue;
        }
        let found = consolidate(pass, &[index], true);
        // Every move single-node judged counts, taken or refused (Karpenter's ApproveCommand).
        let judged = pass.take_last_moves();
        pass.moves.extend(judged);
        match found {
            Ok(found) => {
                let mut command = pass.command(
                    method,
                    &[index],
                    &budgets,
                    found.replacements,
                    found.savings,
                );
                command.destinations = found.destinations;
                return vec![command];
            }
            Err(why) => pass.skip(method, index, why),
        }
    }
    Vec::new()
}

/// The first of each list, then the second of each, and so on.
fn interleave(lists: Vec<Vec<usize>>) -> Vec<usize> {
    let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|k| lists.iter().filter_map(move |l| l.get(k).copied()))
        .collect()
}
