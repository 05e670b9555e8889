//! Multi-node consolidation (controller-behaviour.md §3.4): the candidates in consolidation order while their
//! pool has an `Underutilized` budget (one each), at most [`MAX_CANDIDATES`]; a binary search finds the longest
//! prefix of two or more that can be deleted or replaced by one cheaper node.

use super::super::command::{Command, Method};
use super::consolidation::{candidate, consolidate, order, Move};
use super::Pass;
use crate::api::nodepool::DisruptionReason;

/// The most candidates one multi-node command considers.
pub const MAX_CANDIDATES: usize = 100;

pub(crate) fn commands(pass: &mut Pass<'_>) -> Vec<Command> {
    let method = Method::MultiNodeConsolidation;
    let mut budgets = pass.ledger.for_reason(DisruptionReason::Underutilized);
    let mut candidates = Vec::new();
    for index in 0..pass.facts.len() {
        match candidate(&pass.facts[index]) {
            Ok(true) => candidates.push(index),
            Ok(false) => {}
            Err(why) => pass.skip(method, index, why),
        }
    }
    candidates.sort_by(|&a, &b| order(&pass.facts[a], &pass.facts[b]));
    let mut picked = Vec::new();
    for index in candidates {
        if picked.len() == MAX_CANDIDATES {
            break;
        }
        if budgets.take(&pass.facts[index].target.nodepool).is_ok() {
            picked.push(index);
        }
    }
    let (mut low, mut high) = (2, picked.len());
    let mut best: Option<(usize, Move)> = None;
    while low <= high {
        let mid = (low + high) / 2;
        match consolidate(pass, &picked[..mid], false) {
            Ok(found) => {
                best = Some((mid, found));
                low = mid + 1;
            }
            Err(_) => high = mid - 1,
        }
    }
    let Some((n, found)) = best else {
        return Vec::new();
    };
    let mut command = pass.command(
        method,
        &picked[..n],
        &budgets,
        found.replacements,
        found.savings,
    );
    command.destinations = found.destinations;
    vec![command]
}
