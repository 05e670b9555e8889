//! Drift (controller-behaviour.md §3.3): the oldest drifted node first (empty ones before), one command per
//! pass, its replacements launched before it is drained. A node whose pods would not fit anywhere, even on new
//! capacity, is skipped for the next. No `consolidateAfter`, no 15 s validation.

use super::super::command::{Command, Method, Why};
use super::consolidation::destinations;
use super::facts::Facts;
use super::Pass;
use crate::api::nodepool::DisruptionReason;

/// Whether drift may take `f`, budgets aside.
pub(crate) fn eligible(f: &Facts<'_>) -> bool {
    is_drifted(f) && keeper(f).is_none()
}

fn is_drifted(f: &Facts<'_>) -> bool {
    f.drift.is_some() && !f.expired
}

/// What keeps the drifted node `f`, budgets aside. Drift on a claim with terminationGracePeriod ignores
/// pod-level blockers (§3.2).
fn keeper(f: &Facts<'_>) -> Option<Why> {
    f.ineligible.clone().or_else(|| {
        (!f.has_grace_period())
            .then(|| f.pod_blocker.clone().map(Why::Blocked))
            .flatten()
    })
}

pub(crate) fn commands(pass: &mut Pass<'_>) -> Vec<Command> {
    let method = Method::Drift;
    let budgets = pass.ledger.for_reason(DisruptionReason::Drifted);
    let mut drifted: Vec<usize> = (0..pass.facts.len())
        .filter(|&i| is_drifted(&pass.facts[i]))
        .collect();
    drifted.sort_by(|&a, &b| {
        let (a, b) = (&pass.facts[a], &pass.facts[b]);
        (!a.empty, a.created, &a.target.claim).cmp(&(!b.empty, b.created, &b.target.claim))
    });
    for index in drifted {
        let f = &pass.facts[index];
        if let Some(why) = keeper(f).or_else(|| budgets.check(&f.target.nodepool).err()) {
            pass.skip(method, index, why);
            continue;
        }
        let planned = if f.empty {
            Ok((Vec::new(), Vec::new()))
        } else {
            pass.simulator()
                .without(&[index])
                .map(|plan| (plan.claims.clone(), destinations(&plan)))
        };
        match planned {
            Ok((replacements, destinations)) => {
                let price = pass.facts[index].offering.map_or(0.0, |o| o.price);
                let new: f64 = replacements
                    .iter()
                    .filter_map(|c| c.cheapest.as_ref().and_then(|c| c.price))
                    .sum();
                let mut command =
                    pass.command(method, &[index], &budgets, replacements, price - new);
                command.destinations = destinations;
                return vec![command];
            }
            Err(why) => pass.skip(method, index, why),
        }
    }
    Vec::new()
}
