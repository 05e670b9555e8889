//! Emptiness (controller-behaviour.md §3.3): one delete command with every empty, `Consolidatable` node whose
//! pool still has an `Empty` budget, one unit each. It runs under every consolidation policy.

use super::super::command::{Command, Method, Why};
use super::facts::Facts;
use super::ledger::Allowances;
use super::Pass;
use crate::api::nodepool::DisruptionReason;

pub(crate) fn commands(pass: &mut Pass<'_>) -> Vec<Command> {
    let mut budgets = pass.ledger.for_reason(DisruptionReason::Empty);
    let mut picked = Vec::new();
    for index in 0..pass.facts.len() {
        let f = &pass.facts[index];
        if !f.empty || f.expired {
            continue;
        }
        match take(f, &mut budgets) {
            Ok(()) => picked.push(index),
            Err(why) => pass.skip(Method::Emptiness, index, why),
        }
    }
    command(pass, &picked, &budgets).into_iter().collect()
}

/// Takes one unit of the budget of the empty node `f`, unless something keeps it.
pub(crate) fn take(f: &Facts<'_>, budgets: &mut Allowances) -> Result<(), Why> {
    keeper(f).map_or_else(|| budgets.take(&f.target.nodepool), Err)
}

/// Whether emptiness may take `f`, budgets aside.
pub(crate) fn eligible(f: &Facts<'_>) -> bool {
    f.empty && !f.expired && keeper(f).is_none()
}

/// What keeps the empty node `f`, budgets aside.
fn keeper(f: &Facts<'_>) -> Option<Why> {
    // A static pool keeps its replicas, empty or not (Karpenter's emptiness skips them).
    let static_pool = f
        .pool
        .filter(|p| p.spec.replicas.is_some())
        .map(|_| Why::StaticNodePool(f.target.nodepool.clone()));
    // Provisioning placed CapacityBuffer headroom here: deleting it would only launch it again (Karpenter's
    // emptiness checks `HasBufferPods`; its virtual pods' eviction cost is nothing, so they do not make it busy).
    let buffer = f
        .input
        .pods
        .iter()
        .any(crate::api::capacitybuffer::is_virtual)
        .then(|| Why::HasBufferPods(f.input.node_name().unwrap_or(&f.target.claim).to_owned()));
    f.ineligible
        .clone()
        .or(static_pool)
        .or(buffer)
        .or_else(|| f.pod_blocker.clone().map(Why::Blocked))
        .or_else(|| f.not_consolidatable())
}

/// The delete command for the empty nodes `picked`, if any.
pub(crate) fn command(pass: &Pass<'_>, picked: &[usize], budgets: &Allowances) -> Option<Command> {
    if picked.is_empty() {
        return None;
    }
    let savings = picked
        .iter()
        .filter_map(|&i| pass.facts[i].offering)
        .map(|o| o.price)
        .sum();
    Some(pass.command(Method::Emptiness, picked, budgets, Vec::new(), savings))
}
