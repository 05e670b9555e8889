//! "Would the pods fit without these nodes?" (controller-behaviour.md §3.4, Simulation): the provisioning
//! solve run over the cluster minus the candidates, with the candidates' reschedulable pods, the pending pods
//! and the pods of nodes already going away to place.

use super::super::command::Why;
use super::super::input::DisruptionInput;
use super::super::pods::{is_reschedulable, pod_key};
use super::super::preparation::daemon_pods;
use crate::catalog::Resources;
use crate::scheduling::volumes;
use crate::scheduling::{allows, Cluster, ExistingNode, Plan, PodInfo, ReservedMode, Scheduler};
use k8s_openapi::api::core::v1::Pod;
use std::collections::{BTreeSet, HashMap};

/// The cluster prepared once per pass; each [`Simulator::without`] is one solve.
pub(crate) struct Simulator<'a> {
    scheduler: Scheduler<'a>,
    /// The nodes pods may stay on or move to, in any order: removed nodes are swapped to the tail.
    nodes: Vec<ExistingNode>,
    /// Per input node, its place in `nodes`, or why it is not there.
    position: Vec<Result<usize, Why>>,
    /// Per place in `nodes`, the input node there.
    owner: Vec<usize>,
    /// Per place in `nodes`, its allocatable minus its pods' requests: at least the room the solve sees.
    free: Vec<Resources>,
    /// The largest free CPU and, separately, memory in `free`.
    most_free: Resources,
    /// Every instance type some NodePool may launch, as its allocatable and the cheapest offering that pool
    /// allows, cheapest first: what a new node costs at least.
    launchable: Vec<(Resources, f64)>,
    /// Per input node, the pods that must find a new home if it goes.
    moving: Vec<Vec<PodInfo>>,
    /// Pods that need a home whatever is decided: pending ones and those of deleting or queued nodes. A move
    /// that leaves them without one is not blocked by it (they are the provisioner's business).
    displaced: Vec<PodInfo>,
}

impl<'a> Simulator<'a> {
    pub fn new(input: &DisruptionInput<'a>) -> Self {
        let policies = input.settings.policies;
        // The driver's kept preparation ([`PassPreparation`]), else one of its own.
        let scheduler = match input.prepared {
            Some(prepared) => Scheduler::prepared(input.catalog, prepared),
            None => Scheduler::with_daemonsets(input.nodepools, input.catalog, &daemon_pods(input)),
        };
        let scheduler = scheduler
            .with_min_values_policy(policies.min_values)
            // Consolidation uses what reserved capacity is left, and on-demand or spot beyond it (Karpenter's
            // fallback mode); only provisioning waits for a reservation.
            .with_reserved_mode(ReservedMode::Fallback);
        let mut launchable: Vec<(Resources, f64)> = scheduler
            .templates()
            .iter()
            .flat_map(|t| {
                t.instance_types.iter().filter_map(|&i| {
                    let it = &input.catalog.instance_types[i];
                    let price = it
                        .offerings
                        .iter()
                        .filter(|o| allows(&t.requirements, o))
                        .filter_map(|o| o.price)
                        .fold(f64::INFINITY, f64::min);
                    price.is_finite().then(|| (it.allocatable(), price))
                })
            })
            .collect();
        launchable.sort_by(|a, b| a.1.total_cmp(&b.1));
        // Pending pods go through the provisioner's checks: one its volumes refuse is left out, as is one that
        // cannot be read (the provisioner reports both).
        let mut displaced: Vec<PodInfo> = input
            .pending
            .iter()
            .filter_map(|p| {
                let alternatives = input.volumes.pending(p).ok()?;
                let mut info = PodInfo::from_pod(&policies.apply(p, input.default_spread)).ok()?;
                volumes::apply(&mut info, &alternatives);
                info.attached = input.volumes.attached(p);
                Some(info)
            })
            .collect();
        let mut nodes = Vec::with_capacity(input.nodes.len());
        let mut owner = Vec::with_capacity(input.nodes.len());
        let mut free = Vec::with_capacity(input.nodes.len());
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
            // The pods that may move are prepared as provisioning prepares the pods it places (the cluster's
            // default spread, then the preference policy); those that stay only count, and keep what they have.
            let pods: Vec<std::borrow::Cow<'_, k8s_openapi::api::core::v1::Pod>> = node
                .pods
                .iter()
                .map(|p| {
                    if input.default_spread.is_active() && reschedulable.contains(&pod_key(p)) {
                        policies.apply(p, input.default_spread)
                    } else {
                        policies.preferences.apply(p)
                    }
                })
                .collect();
            let built = Cluster::from_objects(
                node.node.as_slice(),
                std::slice::from_ref(&node.claim),
                &[],
                &pods,
                input.catalog,
            )
            .map(|cluster| cluster.with_volume_limits(input.volumes, &pods));
            let existing = match built {
                Ok(cluster) => cluster.nodes.into_iter().next(),
                Err(e) => {
                    position.push(Err(Why::Unreadable(e.to_string())));
                    moving.push(Vec::new());
                    continue;
                }
            };
            // A pod that moves takes its volumes' topology along: a zonal volume keeps it in its zone. One whose
            // claim, volume or class is gone is left out of the solve, as Karpenter leaves it out.
            let with_claims: HashMap<String, &Pod> = node
                .pods
                .iter()
                .filter(|p| volumes::uses_claims(p))
                .map(|p| (pod_key(p), p))
                .collect();
            let pods: Vec<PodInfo> = existing
                .iter()
                .flat_map(|n| &n.pods)
                .filter(|b| b.daemonset.is_none() && reschedulable.contains(&b.pod.key))
                .filter_map(|b| {
                    let Some(pod) = with_claims.get(&b.pod.key) else {
                        return Some(b.pod.clone());
                    };
                    let alternatives = input.volumes.requirements(pod).ok()?;
                    let mut info = b.pod.clone();
                    volumes::apply(&mut info, &alternatives);
                    info.attached = input.volumes.attached(pod);
                    Some(info)
                })
                .collect();
            match existing {
                Some(existing) if !going => {
                    position.push(Ok(nodes.len()));
                    owner.push(index);
                    let mut room = existing.allocatable.clone();
                    for bound in &existing.pods {
                        room -= &bound.pod.requests;
                    }
                    free.push(room);
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
        let most_free = Resources {
            cpu: free.iter().map(|r| r.cpu).max().unwrap_or(0),
            memory: free.iter().map(|r| r.memory).max().unwrap_or(0),
            ..Resources::default()
        };
        Simulator {
            most_free,
            scheduler,
            nodes,
            position,
            owner,
            free,
            launchable,
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

    /// The summed requests of the pods of `removed` that no other initialized node has the raw room for (CPU,
    /// memory, pod slots and the rest, before taints, affinities or ports), or that a pod staying there shuts
    /// out by a required hostname anti-affinity. Those pods can only go to new capacity (a move that puts one on
    /// a node not initialized yet is refused, see [`Simulator::without`]), so a move is possible only if a node
    /// that holds all of them is cheap enough: a cheap, sound test that spares the solve for nodes that cannot
    /// move (a packed cluster, one pod per node, room only on nodes still launching).
    pub fn homeless_load(&self, removed: &[usize]) -> Result<Resources, Why> {
        let mut gone = Vec::with_capacity(removed.len());
        for &index in removed {
            gone.push(self.position[index].clone()?);
        }
        let mut load = Resources::default();
        for pod in removed.iter().flat_map(|&i| &self.moving[i]) {
            // Most pods of a packed cluster exceed the largest free CPU or memory of any node: no scan needed.
            let housed = pod.requests.cpu <= self.most_free.cpu
                && pod.requests.memory <= self.most_free.memory
                && self.free.iter().enumerate().any(|(place, room)| {
                    !gone.contains(&place)
                        && self.nodes[place].initialized
                        && pod.requests.fits_in(room)
                        && !self.shuts_out(pod, place)
                });
            if !housed {
                load += &pod.requests;
            }
        }
        Ok(load)
    }

    /// A lower bound on the price of a new node that can hold `load`: the cheapest offering a NodePool allows
    /// of a type with room for it, DaemonSets and pod constraints ignored; infinite if no type has the room.
    pub fn cheapest_holding(&self, load: &Resources) -> f64 {
        self.launchable
            .iter()
            .find(|(room, _)| load.fits_in(room))
            .map_or(f64::INFINITY, |(_, price)| *price)
    }

    /// Whether a pod on the node at `place` keeps `pod` off it by `pod`'s required hostname anti-affinity.
    fn shuts_out(&self, pod: &PodInfo, place: usize) -> bool {
        pod.topology.iter().any(|constraint| {
            self.nodes[place]
                .pods
                .iter()
                .any(|bound| constraint.shuts_out_of_host(&bound.pod))
        })
    }

    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.nodes.swap(a, b);
        self.owner.swap(a, b);
        self.free.swap(a, b);
        self.position[self.owner[a]] = Ok(a);
        self.position[self.owner[b]] = Ok(b);
    }
}
