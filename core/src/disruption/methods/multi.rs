//! Multi-node consolidation (controller-behaviour.md §3.4): the candidates in consolidation order while their
//! pool has an `Underutilized` budget (one each), at most [`MAX_CANDIDATES`]; a binary search finds the longest
//! prefix of two or more that can be deleted or replaced by one cheaper node.

use super::super::command::{Command, Method, Why};
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
    // What is reported: the chosen move's pools, else the last move Balanced refused (Karpenter's multi-node
    // events), not every prefix the search tried.
    let (mut best_moves, mut refused_moves) = (Vec::new(), Vec::new());
    while low <= high {
        let mid = (low + high) / 2;
        let found = consolidate(pass, &picked[..mid], false);
        let judged = pass.take_last_moves();
        match found {
            Ok(found) => {
                best = Some((mid, found));
                best_moves = judged;
                low = mid + 1;
            }
            Err(why) => {
                if why == Why::Unbalanced {
                    refused_moves = judged;
                }
                high = mid - 1;
            }
        }
    }
    let Some((n, found)) = best else {
        pass.moves.extend(refused_moves);
        return Vec::new();
    };
    pass.moves.extend(best_moves);
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
