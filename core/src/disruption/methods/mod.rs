//! The disruption methods (controller-behaviour.md §3.1–3.5) and the pass that runs them: expiration, then
//! Emptiness, Drift, multi-node and single-node consolidation (Karpenter v1.5+ order); the first of the four
//! that yields a command ends the pass.

mod balanced;
mod consolidation;
mod drift;
mod emptiness;
mod expiration;
mod facts;
mod ledger;
mod multi;
mod revisit;
mod simulation;
mod single;
mod validate;

use super::command::{Command, ConsolidationMove, Decision, Method, Skip, Target, Why};
use super::input::DisruptionInput;
use super::lifetime::Consolidatable;
use crate::catalog::InstanceType;
use crate::scheduling::PlannedClaim;
use facts::Facts;
use k8s_openapi::jiff::Timestamp;
use ledger::{Allowances, Ledger};
use simulation::Simulator;
use std::collections::HashMap;

pub use consolidation::SPOT_TO_SPOT_TYPES;
pub use multi::MAX_CANDIDATES;
pub use validate::validate;

/// One disruption pass over `input` at `now`: the expired claims to delete, and the commands of the first
/// voluntary method that has any, with why every other node was left alone.
pub fn decide(input: &DisruptionInput<'_>, now: Timestamp) -> Decision {
    decide_observed(input, now, &mut ())
}

/// What a pass tells its caller as it runs each voluntary method (the controller times them for Karpenter's
/// `karpenter_voluntary_disruption_*` metrics). The decision does not depend on it.
pub trait PassObserver {
    /// `method` starts.
    fn started(&mut self, _method: Method) {}
    /// `method` is done; `eligible` nodes were its candidates (before budgets), as Karpenter counts them.
    fn finished(&mut self, _method: Method, _eligible: usize) {}
}

/// No observer.
impl PassObserver for () {}

/// [`decide`], telling `observer` about each voluntary method it runs.
pub fn decide_observed(
    input: &DisruptionInput<'_>,
    now: Timestamp,
    observer: &mut impl PassObserver,
) -> Decision {
    let mut pass = Pass::new(*input, now);
    let mut commands = expiration::commands(&mut pass);
    let methods: [(Method, MethodFn); 4] = [
        (Method::Emptiness, emptiness::commands),
        (Method::Drift, drift::commands),
        (Method::MultiNodeConsolidation, multi::commands),
        (Method::SingleNodeConsolidation, single::commands),
    ];
    let mut budgets_checked = Vec::new();
    for (method, commands_of) in methods {
        observer.started(method);
        let found = commands_of(&mut pass);
        let eligible = eligible(method, &pass.facts);
        observer.finished(method, eligible);
        if eligible > 0 && !budgets_checked.contains(&method.reason()) {
            budgets_checked.push(method.reason());
        }
        if !found.is_empty() {
            commands.extend(found);
            break;
        }
    }
    let drifted = pass
        .facts
        .iter()
        .filter_map(|f| Some((f.target.claim.clone(), f.drift?)))
        .collect();
    let consolidatable = pass
        .facts
        .iter()
        .filter_map(|f| match f.consolidatable {
            Ok(Consolidatable::Since(t)) => Some((f.target.claim.clone(), t)),
            _ => None,
        })
        .collect();
    Decision {
        revisit_at: revisit::revisit_at(&pass),
        commands,
        skipped: pass.skips,
        drifted,
        consolidatable,
        consolidation_moves: pass.moves,
        budgets_checked,
    }
}

/// One voluntary method: the commands it finds in a pass.
type MethodFn = fn(&mut Pass<'_>) -> Vec<Command>;

/// How many nodes `method` may take before budgets: Karpenter's candidates that pass its `ShouldDisrupt`.
fn eligible(method: Method, facts: &[Facts<'_>]) -> usize {
    facts
        .iter()
        .filter(|f| match method {
            Method::Expiration => f.expired,
            Method::Emptiness => emptiness::eligible(f),
            Method::Drift => drift::eligible(f),
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                consolidation::candidate(f) == Ok(true)
            }
        })
        .count()
}

/// The catalog's types by name. Where NodeOverlays gave some pools their own entry of a type (restricted to them
/// by a `karpenter.sh/nodepool` requirement), a pool's nodes are priced from its entry.
pub(crate) struct TypesByName<'a>(HashMap<&'a str, Vec<&'a InstanceType>>);

impl<'a> TypesByName<'a> {
    fn new(catalog: &'a crate::catalog::Catalog) -> Self {
        let mut types: HashMap<&'a str, Vec<&'a InstanceType>> = HashMap::new();
        for it in &catalog.instance_types {
            types.entry(it.name.as_str()).or_default().push(it);
        }
        TypesByName(types)
    }

    /// The type `name` as `pool` sees it.
    pub fn get(&self, name: &str, pool: &str) -> Option<&'a InstanceType> {
        let entries = self.0.get(name)?;
        entries
            .iter()
            .find(|it| {
                it.requirements
                    .get(crate::api::labels::NODEPOOL)
                    .is_none_or(|r| r.has(pool))
            })
            .or(entries.first())
            .copied()
    }
}

/// The state of one pass: the facts of every node (same indices as the input's nodes), the budgets, what was
/// skipped so far, and the simulator, built on first use (emptiness and expiration need none).
pub(crate) struct Pass<'a> {
    pub input: DisruptionInput<'a>,
    pub now: Timestamp,
    pub facts: Vec<Facts<'a>>,
    pub types: TypesByName<'a>,
    pub ledger: Ledger,
    pub skips: Vec<Skip>,
    simulator: Option<Simulator<'a>>,
    /// The per-pool report of the last consolidation move judged (empty until one reaches the approval).
    pub last_moves: std::cell::RefCell<Vec<ConsolidationMove>>,
    /// The moves the methods report.
    pub moves: Vec<ConsolidationMove>,
    /// Each pool's totals for `Balanced`, computed on first use.
    pool_totals: std::cell::OnceCell<HashMap<String, balanced::PoolTotals>>,
}

impl<'a> Pass<'a> {
    fn new(input: DisruptionInput<'a>, now: Timestamp) -> Self {
        let types = TypesByName::new(input.catalog);
        let facts = Facts::all(&input, &types, now);
        let ledger = Ledger::new(&facts, now);
        Pass {
            input,
            now,
            facts,
            types,
            ledger,
            skips: Vec::new(),
            simulator: None,
            last_moves: Default::default(),
            moves: Vec::new(),
            pool_totals: Default::default(),
        }
    }

    /// Each pool's totals over all of its nodes (`Balanced` scoring).
    pub fn pool_totals(&self) -> &HashMap<String, balanced::PoolTotals> {
        self.pool_totals
            .get_or_init(|| balanced::pool_totals(&self.facts))
    }

    /// The report of the last move judged, taken (empty if none reached the approval).
    pub fn take_last_moves(&self) -> Vec<ConsolidationMove> {
        std::mem::take(&mut *self.last_moves.borrow_mut())
    }

    pub fn simulator(&mut self) -> &mut Simulator<'a> {
        let input = self.input;
        self.simulator.get_or_insert_with(|| Simulator::new(&input))
    }

    /// The command of `method` for the nodes `picked`, recording the budgets `allowances` evaluated for them.
    pub fn command(
        &self,
        method: Method,
        picked: &[usize],
        allowances: &Allowances,
        replacements: Vec<PlannedClaim>,
        savings: f64,
    ) -> Command {
        let candidates: Vec<Target> = picked
            .iter()
            .map(|&i| self.facts[i].target.clone())
            .collect();
        Command {
            method,
            reason: method.reason(),
            budgets: allowances.evaluated(candidates.iter().map(|t| t.nodepool.as_str())),
            candidates,
            replacements,
            savings,
            destinations: Vec::new(),
        }
    }

    /// Records that `method` left node `index` alone.
    pub fn skip(&mut self, method: Method, index: usize, why: Why) {
        let target = &self.facts[index].target;
        self.skips.push(Skip {
            method,
            nodepool: Some(target.nodepool.clone()).filter(|p| !p.is_empty()),
            claim: Some(target.claim.clone()),
            why,
        });
    }
}
