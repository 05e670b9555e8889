//! A lower bound on what any placement of some pending pods onto new nodes costs per hour: the linear-programming
//! relaxation of the packing problem. A plan's cost divided by this bound says how far from the best possible
//! the plan can be (issue 20: within 15 % on Karpenter's benchmark mix); it is how the scheduling benchmark
//! measures decision quality.
//!
//! The relaxation, over the new nodes ([`NewNode`]: a NodePool and one of its instance types) that could run
//! each pod alone:
//! - `x[n] >= 0`, how many nodes of kind `n` run, at the cheapest price the pool allows for `n`;
//! - `y[c][n] >= 0`, how many pods of class `c` run on nodes of kind `n`. A class is pods with the same requests,
//!   the same new nodes that fit them, and the same self-excluding group (below); each class's `y` add up to its
//!   pod count;
//! - per kind and resource, the pods' requests fit the room of `x[n]` nodes (allocatable less DaemonSets);
//! - pods that a required hostname anti-affinity keeps apart from each other (each matches the constraint they
//!   all carry) are at most one per node: their `y` on a kind is at most `x` of it.
//!
//! Minimising the cost of the `x` gives the bound. Every real plan is a solution of this relaxation (count its
//! nodes per kind and its pods per class and kind), so no plan costs less. Spread and affinity constraints,
//! capacity types the pods ask for, host ports and limits only remove plans, so leaving them out keeps the
//! bound valid, and looser. New nodes with no known price are left out: a plan that uses one has no known cost.

use super::{NewNode, PodInfo, Scheduler};
use microlp::{ComparisonOp, OptimizationDirection, Problem};
use std::collections::BTreeMap;

/// The bound, and what it was computed over.
#[derive(Clone, Debug, PartialEq)]
pub struct CostBound {
    /// USD per hour.
    pub per_hour: f64,
    /// How many classes of pods and kinds of new nodes the relaxation had.
    pub classes: usize,
    pub node_kinds: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum BoundError {
    #[error("pod {pod} fits no new node with a known price")]
    Unplaceable { pod: String },
    #[error("the linear program could not be solved: {0}")]
    Solver(String),
}

/// The requests a class of pods has, per resource the bound counts.
type Requests = Vec<(Resource, i64)>;

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Resource {
    Cpu,
    Memory,
    Pods,
    EphemeralStorage,
    Extended(String),
}

/// The least cost of running `pods` on new nodes from `scheduler`'s NodePools.
pub fn lower_bound(scheduler: &Scheduler, pods: &[PodInfo]) -> Result<CostBound, BoundError> {
    // Pods of one workload share everything the relaxation reads: count them once.
    let mut classes: BTreeMap<(Requests, Vec<NewNode>, Option<String>), f64> = BTreeMap::new();
    for pod in pods {
        let nodes: Vec<NewNode> = scheduler
            .new_nodes_for(pod)
            .into_iter()
            .filter(|n| scheduler.price(*n).is_some())
            .collect();
        if nodes.is_empty() {
            return Err(BoundError::Unplaceable {
                pod: pod.key.clone(),
            });
        }
        *classes
            .entry((requests(pod), nodes, apart_group(pod)))
            .or_default() += 1.0;
    }
    let mut problem = Problem::new(OptimizationDirection::Minimize);
    let kinds: Vec<NewNode> = {
        let mut all: Vec<NewNode> = classes.keys().flat_map(|k| k.1.iter().copied()).collect();
        all.sort_unstable();
        all.dedup();
        all
    };
    let x: BTreeMap<NewNode, microlp::Variable> = kinds
        .iter()
        .map(|n| {
            let price = scheduler.price(*n).unwrap_or(f64::INFINITY);
            (*n, problem.add_var(price, (0.0, f64::INFINITY)))
        })
        .collect();
    // Per kind: each class's pods there, with their requests.
    let mut on_kind: BTreeMap<NewNode, Vec<(microlp::Variable, &Requests)>> = BTreeMap::new();
    let mut apart: BTreeMap<(&str, NewNode), Vec<microlp::Variable>> = BTreeMap::new();
    for ((requests, nodes, group), count) in &classes {
        let ys: Vec<(microlp::Variable, f64)> = nodes
            .iter()
            .map(|n| {
                let y = problem.add_var(0.0, (0.0, f64::INFINITY));
                on_kind.entry(*n).or_default().push((y, requests));
                if let Some(group) = group {
                    apart.entry((group.as_str(), *n)).or_default().push(y);
                }
                (y, 1.0)
            })
            .collect();
        problem.add_constraint(ys.as_slice(), ComparisonOp::Eq, *count);
    }
    for (kind, placed) in &on_kind {
        let room = scheduler.room(*kind);
        let mut resources: Vec<&Resource> = placed
            .iter()
            .flat_map(|(_, r)| r.iter().map(|(res, _)| res))
            .collect();
        resources.sort_unstable();
        resources.dedup();
        for resource in resources {
            let capacity = amount(room, resource) as f64;
            // As fractions of one node's room, so that bytes and millicores meet the solver at one scale.
            let mut row: Vec<(microlp::Variable, f64)> = placed
                .iter()
                .filter_map(|(y, requests)| {
                    let need = requests.iter().find(|(r, _)| r == resource)?.1 as f64;
                    Some((*y, need / capacity))
                })
                .collect();
            row.push((x[kind], -1.0));
            problem.add_constraint(row.as_slice(), ComparisonOp::Le, 0.0);
        }
    }
    for ((_, kind), ys) in &apart {
        let mut row: Vec<(microlp::Variable, f64)> = ys.iter().map(|y| (*y, 1.0)).collect();
        row.push((x[kind], -1.0));
        problem.add_constraint(row.as_slice(), ComparisonOp::Le, 0.0);
    }
    let solution = problem
        .solve()
        .map_err(|e| BoundError::Solver(e.to_string()))?;
    Ok(CostBound {
        per_hour: solution.objective(),
        classes: classes.len(),
        node_kinds: kinds.len(),
    })
}

/// `pod`'s requests the bound counts (a pod takes one of a node's pod slots).
fn requests(pod: &PodInfo) -> Requests {
    let r = &pod.requests;
    let mut out = vec![(Resource::Pods, 1)];
    for (resource, value) in [
        (Resource::Cpu, r.cpu),
        (Resource::Memory, r.memory),
        (Resource::EphemeralStorage, r.ephemeral_storage),
    ] {
        if value > 0 {
            out.push((resource, value));
        }
    }
    out.extend(
        r.extended
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| (Resource::Extended(k.clone()), *v)),
    );
    out.sort();
    out
}

fn amount(room: &crate::catalog::Resources, resource: &Resource) -> i64 {
    match resource {
        Resource::Cpu => room.cpu,
        Resource::Memory => room.memory,
        Resource::Pods => room.pods,
        Resource::EphemeralStorage => room.ephemeral_storage,
        Resource::Extended(name) => room.extended.get(name).copied().unwrap_or(0),
    }
}

/// The group of pods `pod` may not share a node with, itself among them: a required hostname anti-affinity that
/// matches the pod. Every pod with the same constraint that it matches is kept off the others' nodes.
fn apart_group(pod: &PodInfo) -> Option<String> {
    pod.topology
        .iter()
        .find(|c| c.shuts_out_of_host(pod))
        .map(|c| format!("{}/{c:?}", pod.namespace))
}
