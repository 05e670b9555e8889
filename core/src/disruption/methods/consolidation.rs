//! Consolidation of a set of candidates (controller-behaviour.md §3.4, Outcomes): delete them when their pods
//! fit elsewhere, or replace them with one strictly cheaper node, never with churn.

use super::super::command::Why;
use super::facts::Facts;
use super::Pass;
use crate::api::labels;
use crate::api::nodepool::ConsolidationPolicy;
use crate::api::requirements::{Requirement, Requirements};
use crate::catalog::{CapacityType, InstanceType, Resources};
use crate::scheduling::{allows, Choice, Plan, PlannedClaim, TypeName};
use std::cmp::Ordering;

/// Single-node spot-to-spot needs at least this many cheaper spot types, and keeps this many.
pub const SPOT_TO_SPOT_TYPES: usize = 15;

/// A valid consolidation of some candidates.
#[derive(Debug)]
pub(crate) struct Move {
    /// Empty for a delete; one claim for a replace.
    pub replacements: Vec<PlannedClaim>,
    /// USD per hour saved, at the replacement's dearest allowed offering.
    pub savings: f64,
    /// The existing nodes the candidates' pods go to.
    pub destinations: Vec<String>,
}

/// Why consolidation leaves the node alone before any simulation, or `Ok` if it is a candidate. Empty and
/// expired nodes are not consolidation's business (`Ok(false)`).
pub(crate) fn candidate(f: &Facts<'_>) -> Result<bool, Why> {
    if let Some(why) = &f.ineligible {
        return Err(why.clone());
    }
    if f.empty || f.expired {
        return Ok(false);
    }
    if let Some(b) = &f.pod_blocker {
        return Err(Why::Blocked(b.clone()));
    }
    if f.policy() == ConsolidationPolicy::WhenEmpty {
        return Err(Why::WhenEmptyOnly);
    }
    if f.pool.is_some_and(|p| p.spec.replicas.is_some()) {
        return Err(Why::StaticNodePool(f.target.nodepool.clone()));
    }
    if f.offering.is_none() {
        return Err(Why::UnknownOffering);
    }
    match f.not_consolidatable() {
        Some(why) => Err(why),
        None => Ok(true),
    }
}

/// Consolidation order (v1.14): price per unit of reschedule cost, highest first; then the cheapest to
/// disrupt; then by name, so that passes are deterministic.
pub(crate) fn order(a: &Facts<'_>, b: &Facts<'_>) -> Ordering {
    value(b)
        .total_cmp(&value(a))
        .then(a.disruption_cost.total_cmp(&b.disruption_cost))
        .then_with(|| a.target.claim.cmp(&b.target.claim))
}

/// The first key of [`order`]: the node's price per unit of reschedule cost. It does not change with time.
pub(crate) fn value(f: &Facts<'_>) -> f64 {
    f.offering.map_or(0.0, |o| o.price) / f.reschedule_cost
}

/// How `candidates` (indices into the pass's facts) can be consolidated, if they can. `single` applies the
/// single-node spot-to-spot minimum.
pub(crate) fn consolidate(
    pass: &mut Pass<'_>,
    candidates: &[usize],
    single: bool,
) -> Result<Move, Why> {
    let total: f64 = candidates
        .iter()
        .filter_map(|&i| pass.facts[i].offering)
        .map(|o| o.price)
        .sum();
    let threshold = ceiling(pass, total);
    let simulator = pass.simulator();
    let homeless = simulator.homeless_load(candidates)?;
    if homeless != Resources::default() && simulator.cheapest_holding(&homeless) >= threshold {
        return Err(Why::NoCheaperReplacement);
    }
    let plan = pass.simulator().without(candidates)?;
    let facts: Vec<&Facts<'_>> = candidates.iter().map(|&i| &pass.facts[i]).collect();
    let destinations = destinations(&plan);
    let mut claims = plan.claims;
    let claim = match claims.len() {
        0 => {
            return balanced(pass, &facts, total).map(|()| Move {
                replacements: Vec::new(),
                savings: total,
                destinations,
            })
        }
        1 => claims.remove(0),
        n => return Err(Why::TooManyReplacements(n)),
    };
    replace(pass, &facts, claim, total, single).map(|found| Move {
        destinations,
        ..found
    })
}

/// The existing nodes a plan puts pods on.
pub(crate) fn destinations(plan: &Plan) -> Vec<String> {
    plan.existing.iter().map(|p| p.node.clone()).collect()
}

/// What a replacement of nodes costing `total` must cost less than: `total` minus the margin.
fn ceiling(pass: &Pass<'_>, total: f64) -> f64 {
    total * (1.0 - pass.input.settings.replace_margin)
}

/// The one-node replacement of the candidates `facts` (costing `total`) that the solve planned as `claim`,
/// if it is really cheaper and would not churn.
fn replace(
    pass: &Pass<'_>,
    facts: &[&Facts<'_>],
    claim: PlannedClaim,
    total: f64,
    single: bool,
) -> Result<Move, Why> {
    let threshold = ceiling(pass, total);
    let now = pass.now;
    let window = pass.input.settings.no_churn_window;
    if let Some(t) = facts
        .iter()
        .filter_map(|f| f.input.launched_as_replacement)
        .find(|t| now.duration_since(*t).as_secs_f64() < window.as_secs_f64())
    {
        return Err(Why::WouldChurn(t));
    }
    let all_spot = facts.iter().all(|f| {
        f.offering
            .is_some_and(|o| o.capacity_type == CapacityType::Spot)
    });
    let capacity = claim.requirements.get(labels::CAPACITY_TYPE);
    let allows_spot = capacity.is_none_or(|r| r.has(labels::CAPACITY_TYPE_SPOT));
    let allows_on_demand = capacity.is_none_or(|r| r.has(labels::CAPACITY_TYPE_ON_DEMAND));
    let spot_to_spot = all_spot && allows_spot;
    if spot_to_spot && !pass.input.settings.spot_to_spot {
        return Err(Why::SpotToSpotDisabled);
    }
    // A replacement allowed both spot and on-demand is pinned to spot; spot-to-spot prices spot only.
    let mut requirements = claim.requirements.clone();
    if spot_to_spot || (allows_spot && allows_on_demand) {
        requirements.add(Requirement::one_of(
            labels::CAPACITY_TYPE,
            [labels::CAPACITY_TYPE_SPOT],
        ));
    }
    // Spot-to-spot compares what the launch will pay (the cheapest spot offering); otherwise the worst case
    // over everything the claim allows, so the saving holds whichever offering the launch gets.
    let price_of = |it: &InstanceType| {
        if spot_to_spot {
            cheapest_price(it, &requirements)
        } else {
            worst_price(it, &claim.requirements)
        }
    };
    let mut kept: Vec<(TypeName, &InstanceType, f64)> = claim
        .instance_types
        .iter()
        .filter_map(|name| {
            let it = pass.types.get(name.as_ref(), &claim.nodepool)?;
            let price = price_of(it)?;
            let same_type_no_cheaper = facts.iter().any(|f| {
                f.offering
                    .is_some_and(|o| o.instance_type == it.name && o.price <= price)
            });
            (price < threshold && !same_type_no_cheaper).then(|| (name.clone(), it, price))
        })
        .collect();
    kept.sort_by(|a, b| a.2.total_cmp(&b.2));
    if kept.is_empty() {
        return Err(Why::NoCheaperReplacement);
    }
    if spot_to_spot && single {
        if kept.len() < SPOT_TO_SPOT_TYPES {
            return Err(Why::TooFewSpotTypes(kept.len()));
        }
        kept.truncate(SPOT_TO_SPOT_TYPES);
    }
    let dearest = kept.iter().map(|k| k.2).fold(0.0, f64::max);
    let savings = total - dearest;
    balanced(pass, facts, savings)?;
    let cheapest = kept
        .iter()
        .filter_map(|(_, it, _)| Choice::cheapest(it, &requirements))
        .min_by(|a, b| {
            a.price
                .unwrap_or(f64::MAX)
                .total_cmp(&b.price.unwrap_or(f64::MAX))
        });
    Ok(Move {
        replacements: vec![PlannedClaim {
            requirements,
            instance_types: kept.into_iter().map(|k| k.0).collect(),
            cheapest,
            ..claim
        }],
        savings,
        destinations: Vec::new(),
    })
}

/// The `Balanced` policy's approval ([`super::balanced`]); the move's report per pool is left in the pass for
/// the method to keep or drop. Other policies approve every saving.
fn balanced(pass: &Pass<'_>, facts: &[&Facts<'_>], savings: f64) -> Result<(), Why> {
    let (approved, moves) = super::balanced::evaluate(pass, facts, savings);
    *pass.last_moves.borrow_mut() = moves;
    if approved {
        Ok(())
    } else {
        Err(Why::Unbalanced)
    }
}

/// The highest price among the offerings `requirements` allow; `None` if one has no known price (kerf never
/// guesses) or none is allowed.
fn worst_price(it: &InstanceType, requirements: &Requirements) -> Option<f64> {
    let mut worst: Option<f64> = None;
    for o in it.offerings.iter().filter(|o| allows(requirements, o)) {
        worst = Some(worst.unwrap_or(0.0).max(o.price?));
    }
    worst
}

fn cheapest_price(it: &InstanceType, requirements: &Requirements) -> Option<f64> {
    Choice::cheapest(it, requirements).and_then(|c| c.price)
}
