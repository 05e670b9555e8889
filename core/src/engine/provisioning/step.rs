//! One provisioning step, as both drivers carry it out: the decision ([`plan::decide`]) over the pods to solve,
//! the nodes to nominate and where CapacityBuffer virtual pods went. The controller applies a [`Step`] to the
//! apiserver and the cloud (NodeClaims created, nominations kept, buffers' status written), `kerf simulate` to its
//! virtual cluster (claims launched, pods bound); neither re-derives what is decided here.

use super::plan::{self, Decisions, Preparations, Snapshot};
use crate::catalog::Catalog;
use crate::engine::buffers::{self, Placed};
use crate::scheduling::ClusterError;
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// What one provisioning step decided.
#[derive(Debug)]
pub struct Step {
    pub decisions: Decisions,
    /// The nodes (Node names, or names of claims in flight) that real pods were planned onto, each with those
    /// pods, in the order the solve placed them: they are nominated (no disruption takes them while the pods are
    /// on their way) and, in the simulator, the pods are bound there. Nodes that only virtual pods were planned
    /// onto are not here: virtual pods come back every step, so their nodes would never be disruptable
    /// (Karpenter's scheduler skips them when it nominates).
    pub nominated: Vec<(String, Vec<String>)>,
    /// Where the virtual pods of CapacityBuffers went.
    pub buffers: BufferPlacement,
}

/// Where one step put the virtual pods of CapacityBuffers. They are never bound: disruption keeps room for those
/// on Nodes, and counts the others as pending pods.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BufferPlacement {
    /// Per buffer (`namespace/name`), how many went to existing capacity, new capacity or nowhere: its
    /// `Provisioning` condition.
    pub by_buffer: BTreeMap<String, Placed>,
    /// Virtual pods (keys) planned onto registered Nodes, by Node name.
    pub on_nodes: BTreeMap<String, Vec<String>>,
    /// Virtual pods (keys) planned onto claims without a Node yet (in flight or created by this step).
    pub on_claims: Vec<String>,
    /// Virtual pods (keys) that fit nowhere.
    pub nowhere: Vec<String>,
}

impl BufferPlacement {
    /// The virtual pods that disruption counts as pending: all but those on Nodes.
    pub fn waiting(&self) -> impl Iterator<Item = &str> {
        self.on_claims
            .iter()
            .chain(&self.nowhere)
            .map(String::as_str)
    }

    /// Whether the virtual pod `key` was planned onto capacity (a Node or a claim).
    pub fn is_placed(&self, key: &str) -> bool {
        self.on_claims.iter().any(|k| k == key)
            || self.on_nodes.values().flatten().any(|k| k == key)
    }
}

/// One step over `snapshot`: solves for `to_solve` (the driver's pending pods, and those of nodes being deleted)
/// with each EC2NodeClass's catalog, reusing `preparations` where nothing they depend on changed.
pub fn step(
    snapshot: &Snapshot,
    to_solve: &[&Pod],
    catalogs: &BTreeMap<String, Arc<Catalog>>,
    preparations: &mut Preparations,
) -> Result<Step, ClusterError> {
    let decisions = plan::decide(snapshot, to_solve, catalogs, preparations)?;
    let virtual_pods: HashMap<String, &Pod> = to_solve
        .iter()
        .filter(|p| buffers::is_virtual(p))
        .map(|p| (plan::pod_key(p), *p))
        .collect();
    let nominated = decisions
        .nominated_nodes()
        .into_iter()
        .filter_map(|(node, pods)| {
            let real: Vec<String> = pods
                .into_iter()
                .filter(|key| !virtual_pods.contains_key(*key))
                .map(str::to_owned)
                .collect();
            (!real.is_empty()).then(|| (node.to_owned(), real))
        })
        .collect();
    let buffers = if virtual_pods.is_empty() {
        BufferPlacement::default()
    } else {
        place_buffers(snapshot, &decisions, &virtual_pods)
    };
    Ok(Step {
        decisions,
        nominated,
        buffers,
    })
}

fn place_buffers(
    snapshot: &Snapshot,
    decisions: &Decisions,
    virtual_pods: &HashMap<String, &Pod>,
) -> BufferPlacement {
    let nodes: HashSet<&str> = snapshot
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let mut placement = BufferPlacement::default();
    let mut count = |key: &str, bump: fn(&mut Placed)| -> bool {
        let Some(buffer) = virtual_pods.get(key).and_then(|p| buffers::buffer_of(p)) else {
            return false;
        };
        bump(placement.by_buffer.entry(buffer).or_default());
        true
    };
    let mut on_nodes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut on_claims = Vec::new();
    let mut nowhere = Vec::new();
    for (key, target) in &decisions.nominated {
        if !count(key, |p| p.existing += 1) {
            continue;
        }
        match target.strip_prefix("node/").filter(|n| nodes.contains(n)) {
            Some(node) => on_nodes
                .entry(node.to_owned())
                .or_default()
                .push(key.clone()),
            None => on_claims.push(key.clone()),
        }
    }
    for new in &decisions.claims {
        for key in &new.pods {
            if count(key, |p| p.new_capacity += 1) {
                on_claims.push(key.clone());
            }
        }
    }
    for unschedulable in &decisions.unschedulable {
        if count(&unschedulable.pod, |p| p.failed += 1) {
            nowhere.push(unschedulable.pod.clone());
        }
    }
    placement.on_nodes = on_nodes;
    placement.on_claims = on_claims;
    placement.nowhere = nowhere;
    placement
}

#[cfg(test)]
mod tests;
