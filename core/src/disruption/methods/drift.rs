//! Drift (controller-behaviour.md §3.3): the oldest drifted node first (empty ones before), one command per
//! pass, its replacements launched before it is drained. A node whose pods would not fit anywhere, even on new
//! capacity, is skipped for the next. No `consolidateAfter`, no 15 s validation.
//!
//! A node of a static pool (`replicas`) is replaced one for one by a claim of its pool's template whatever its
//! pods (Karpenter's static drift), not while the pool is above its replicas (a scale-down comes first), and only
//! within `limits.nodes`.

use super::super::command::{Command, Method, Why};
use super::consolidation::destinations;
use super::facts::Facts;
use super::Pass;
use crate::api::nodepool::{DisruptionReason, NodePool};
use crate::scheduling::replicas_of;
use crate::scheduling::PlannedClaim;

/// Whether drift may take `f`, budgets aside.
pub(crate) fn eligible(f: &Facts<'_>) -> bool {
    is_drifted(f) && keeper(f).is_none()
}

fn is_drifted(f: &Facts<'_>) -> bool {
    f.drift.is_some() && !f.expired
}

/// What keeps the drifted node `f`, budgets aside. Drift on a claim with terminationGracePeriod ignores
/// pod-level blockers (controller-behaviour.md §3.2).
fn keeper(f: &Facts<'_>) -> Option<Why> {
    f.ineligible.clone().or_else(|| {
        (!f.has_grace_period())
            .then(|| f.pod_blocker.clone().map(Why::Blocked))
            .flatten()
    })
}

/// The static pool of `f`'s node, with its replicas and node limit.
fn static_pool<'a>(f: &Facts<'a>) -> Option<(&'a NodePool, u64, Option<u64>)> {
    let pool = f.pool?;
    let (replicas, limit) = replicas_of(pool)?;
    Some((pool, replicas, limit))
}

/// The replacement of a drifted node of static pool `pool`, unless the pool is above its replicas or at its
/// node limit.
fn static_replacement(
    pass: &Pass<'_>,
    pool: &NodePool,
    replicas: u64,
    limit: Option<u64>,
) -> Result<(Vec<PlannedClaim>, Vec<String>), Why> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let mine = || pass.facts.iter().filter(|f| f.target.nodepool == name);
    let deleting = mine()
        .filter(|f| f.input.claim.metadata.deletion_timestamp.is_some())
        .count();
    let pending = mine()
        .filter(|f| f.input.claim.metadata.deletion_timestamp.is_none() && f.input.queued)
        .count();
    let running = mine().count() - deleting - pending;
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    if count(running + pending) > replicas {
        return Err(Why::StaticPoolBusy(format!(
            "static NodePool {name} is above its {replicas} replicas: scaling down first"
        )));
    }
    if limit.is_some_and(|l| count(running + deleting + pending) >= l) {
        return Err(Why::StaticPoolBusy(format!(
            "static NodePool {name} is at its node limit"
        )));
    }
    let replacement =
        crate::scheduling::static_replacement(pool, pass.input.catalog).ok_or_else(|| {
            Why::StaticPoolBusy(format!(
                "static NodePool {name} has requirements that do not parse"
            ))
        })?;
    Ok((vec![replacement], Vec::new()))
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
        let planned = if let Some((pool, replicas, limit)) = static_pool(f) {
            static_replacement(pass, pool, replicas, limit)
        } else if f.empty {
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
