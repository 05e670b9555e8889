//! "Would the pods fit without these nodes?" (controller-behaviour.md §3.4, Simulation): the provisioning
//! solve run over the cluster minus the candidates, with the candidates' reschedulable pods, the pending pods
//! and the pods of nodes already going away to place.

use super::super::command::Why;
use super::super::input::DisruptionInput;
use super::super::pods::{is_reschedulable, pod_key};
use crate::scheduling::{Cluster, DaemonSetPod, ExistingNode, Plan, PodInfo, Scheduler};
use std::collections::BTreeSet;

/// The cluster prepared once per pass; each [`Simulator::without`] is one solve.
pub(crate) struct Simulator<'a> {
    scheduler: Scheduler<'a>,
    /// The nodes pods may stay on or move to, in any order: removed nodes are swapped to the tail.
    nodes: Vec<ExistingNode>,
    /// Per input node, its place in `nodes`, or why it is not there.
    position: Vec<Result<usize, Why>>,
    /// Per place in `nodes`, the input node there.
    owner: Vec<usize>,
    /// Per input node, the pods that must find a new home if it goes.
    moving: Vec<Vec<PodInfo>>,
    /// Pods that need a home whatever is decided: pending ones and those of deleting or queued nodes. A move
    /// that leaves them without one is not blocked by it (they are the provisioner's business).
    displaced: Vec<PodInfo>,
}

impl<'a> Simulator<'a> {
    pub fn new(input: &DisruptionInput<'a>) -> Self {
        let daemonsets: Vec<DaemonSetPod> = input
            .daemonsets
            .iter()
            .filter_map(|d| DaemonSetPod::from_daemonset(d).ok())
            .collect();
        let scheduler = Scheduler::with_daemonsets(input.nodepools, input.catalog, &daemonsets);
        let mut displaced: Vec<PodInfo> = input
            .pending
            .iter()
            .filter_map(|p| PodInfo::from_pod(p).ok())
            .collect();
        let mut nodes = Vec::with_capacity(input.nodes.len());
        let mut owner = Vec::with_capacity(input.nodes.len());
        let mut position = Vec::with_capacity(input.nodes.len());
        let mut moving = Vec::with_capacity(input.nodes.len());
        for (index, node) in input.nodes.iter().enumerate() {
            let reschedulable: BTreeSet<String> = node
                .pods
                .iter()
                .filter(|p| is_reschedulable(p))
                .map(pod_key)
                .collect();
            let going = node.queued
                || node.claim.metadata.deletion_timestamp.is_some()
                || node
                    .node
                    .as_ref()
                    .is_some_and(|n| n.metadata.deletion_timestamp.is_some());
            let built = Cluster::from_objects(
                node.node.as_slice(),
                std::slice::from_ref(&node.claim),
                &[],
                &node.pods,
                input.catalog,
            );
            let existing = match built {
                Ok(cluster) => cluster.nodes.into_iter().next(),
                Err(e) => {
                    position.push(Err(Why::Unreadable(e.to_string())));
                    moving.push(Vec::new());
                    continue;
                }
            };
            let pods: Vec<PodInfo> = existing
                .iter()
                .flat_map(|n| &n.pods)
                .filter(|b| b.daemonset.is_none() && reschedulable.contains(&b.pod.key))
                .map(|b| b.pod.clone())
                .collect();
            match existing {
                Some(existing) if !going => {
                    position.push(Ok(nodes.len()));
                    owner.push(index);
                    nodes.push(existing);
                    moving.push(pods);
                }
                // Cordoned: its pods stay where they are, and nothing moves onto it.
                None if !going => {
                    position.push(Err(Why::Unreadable(String::from(
                        "the node is cordoned or its capacity is unknown",
                    ))));
                    moving.push(Vec::new());
                }
                _ => {
                    position.push(Err(Why::Deleting));
                    displaced.extend(pods);
                    moving.push(Vec::new());
                }
            }
        }
        Simulator {
            scheduler,
            nodes,
            position,
            owner,
            moving,
            displaced,
        }
    }

    /// The plan for the pods of the input nodes `removed` (indices into [`DisruptionInput::nodes`], no
    /// repeats) once those nodes are gone, or why the move is impossible: one of their pods finds no home, or
    /// only an uninitialized one.
    pub fn without(&mut self, removed: &[usize]) -> Result<Plan, Why> {
        let mut end = self.nodes.len();
        for &index in removed {
            let place = self.position[index].clone()?;
            end -= 1;
            self.swap(place, end);
        }
        let mut pods = self.displaced.clone();
        let mut must_move = BTreeSet::new();
        for &index in removed {
            for pod in &self.moving[index] {
                must_move.insert(pod.key.as_str());
                pods.push(pod.clone());
            }
        }
        let plan = self.scheduler.solve_on(&pods, &self.nodes[..end]);
        if let Some(u) = plan
            .unschedulable
            .iter()
            .find(|u| must_move.contains(u.pod.as_str()))
        {
            return Err(Why::PodsDoNotFit {
                pod: u.pod.clone(),
                reason: u.reason.clone(),
            });
        }
        for placement in &plan.existing {
            let initialized = self
                .nodes
                .iter()
                .find(|n| n.name == placement.node)
                .is_none_or(|n| n.initialized);
            if let Some(pod) = placement
                .pods
                .iter()
                .find(|p| !initialized && must_move.contains(p.as_str()))
            {
                return Err(Why::UninitializedNode {
                    pod: pod.clone(),
                    node: placement.node.clone(),
                });
            }
        }
        Ok(plan)
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.nodes.swap(a, b);
        self.owner.swap(a, b);
        self.position[self.owner[a]] = Ok(a);
        self.position[self.owner[b]] = Ok(b);
    }
}
