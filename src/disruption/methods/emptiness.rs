//! Emptiness (controller-behaviour.md §3.3): one delete command with every empty, `Consolidatable` node whose
//! pool still has an `Empty` budget, one unit each. It runs under every consolidation policy.

use super::super::command::{Command, Method};
use super::Pass;
use crate::api::nodepool::DisruptionReason;

pub(crate) fn commands(pass: &mut Pass<'_>) -> Vec<Command> {
    let method = Method::Emptiness;
    let mut budgets = pass.ledger.for_reason(DisruptionReason::Empty);
    let mut picked = Vec::new();
    for index in 0..pass.facts.len() {
        let f = &pass.facts[index];
        if !f.empty || f.expired {
            continue;
        }
        let why = f
            .ineligible
            .clone()
            .or_else(|| f.pod_blocker.clone().map(super::Why::Blocked))
            .or_else(|| f.not_consolidatable());
        let pool = f.target.nodepool.clone();
        match why.map_or_else(|| budgets.take(&pool), Err) {
            Ok(()) => picked.push(index),
            Err(why) => pass.skip(method, index, why),
        }
    }
    if picked.is_empty() {
        return Vec::new();
    }
    let savings = picked
        .iter()
        .filter_map(|&i| pass.facts[i].offering)
        .map(|o| o.price)
        .sum();
    vec![pass.command(method, &picked, &budgets, Vec::new(), savings)]
}
