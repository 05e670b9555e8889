//! After every pod is placed: pods that nothing constrains move out of a claim into room other claims have left
//! under the type they launch as, when the claim they leave then launches a cheaper type.
//!
//! Karpenter's queue places each pod onto the first claim that takes it and never looks back, so a workload
//! that needs a node per pod (hostname anti-affinity) leaves most of those nodes part empty, while the pods
//! that could fill them sit on a large node of their own. Moving them costs no node, and prices no claim
//! higher: a receiving claim keeps the type it launches as (the pod fits in its room), and a giving claim moves
//! only pods whose going makes it cheaper. Node counts stay as Karpenter's; cost falls (docs/scheduling.md,
//! "Filling the room a plan leaves").

use super::*;
use std::collections::HashMap;

impl Solver<'_, '_> {
    /// Moves free pods between the claims of one NodePool where that makes the plan cheaper (module doc).
    /// Nothing moves when the catalog has capacity reservations (which claims hold them is part of the plan).
    pub(super) fn refill(&mut self) {
        if self.claims.len() < 2 || !self.reservations.is_empty() {
            return;
        }
        let scheduler = self.scheduler;
        let movable: Vec<bool> = (0..self.pods.len()).map(|p| self.movable(p)).collect();
        let mut ranked = RankedByRequirements::default();
        // Each claim's type to launch and its price, while it is known (the first of its pool's types in price
        // order that the claim still lists), and the room that type leaves.
        let mut listed = vec![false; scheduler.catalog.instance_types.len()];
        let mut launch: Vec<Option<(usize, f64)>> = Vec::with_capacity(self.claims.len());
        for c in &self.claims {
            for &i in c.instance_types.iter() {
                listed[i] = true;
            }
            let choices = ranked.get(self, c.template, &c.requirements);
            launch.push(priced(
                choices.ranked.iter().find(|(i, _)| listed[*i]).copied(),
            ));
            for &i in c.instance_types.iter() {
                listed[i] = false;
            }
        }
        let mut spare: Vec<Option<Floor>> = self
            .claims
            .iter()
            .zip(&launch)
            .map(|(c, l)| {
                let (i, _) = (*l)?;
                Some(Floor::left(
                    &scheduler.prepared.daemons[c.template].room[i],
                    &c.requests,
                ))
            })
            .collect();
        // The dearest claims first: they have the most to give.
        let mut donors: Vec<usize> = (0..self.claims.len())
            .filter(|c| self.claims[*c].pods.iter().any(|p| movable[*p]))
            .collect();
        donors.sort_by(|a, b| {
            let price = |c: usize| launch[c].map_or(0.0, |(_, price)| price);
            price(*b).total_cmp(&price(*a)).then(a.cmp(b))
        });
        for d in donors {
            let Some((_, before)) = launch[d] else {
                continue;
            };
            let giver = &self.claims[d];
            let choices = ranked.get(self, giver.template, &giver.requirements);
            let mask = admitted_mask(self, giver);
            let daemons = &scheduler.prepared.daemons[giver.template];
            let ports = giver.ports.clone();
            // Whether type `i` is one the giver may launch as holding `requests`.
            let holds = |i: usize, requests: &Resources| {
                mask.as_ref().is_none_or(|m| m[i])
                    && requests.fits_in(&daemons.room[i])
                    && (ports.is_empty()
                        || !ports_clash(&ports, &daemons.groups[daemons.group[i]].ports))
            };
            // What the giver launches as holding `requests`: the first of its choices that holds them.
            let cheapest_holding = |requests: &Resources| {
                choices
                    .ranked
                    .iter()
                    .find(|(i, _)| holds(*i, requests))
                    .copied()
            };
            // Each free pod, in placement order (largest first), into the other claim of the pool whose room
            // it fits tightest; after each, what the giver would launch as.
            let mut left = giver.requests.clone();
            let mut moves: Vec<(usize, usize)> = Vec::new();
            let mut best: Option<(usize, f64)> = None;
            for &p in giver.pods.iter().filter(|p| movable[**p]) {
                let pod = &self.pods[p];
                let Some((_, r)) = (0..self.claims.len())
                    .filter(|&r| r != d && self.claims[r].template == giver.template)
                    .filter_map(|r| {
                        let room = spare[r].as_ref()?;
                        room.holds(&pod.requests)
                            .then_some((room.cpu - pod.requests.cpu, r))
                    })
                    .min()
                else {
                    continue;
                };
                if let Some(room) = spare[r].as_mut() {
                    room.take(&pod.requests);
                }
                left -= &pod.requests;
                moves.push((p, r));
                if let Some((_, price)) = cheapest_holding(&left)
                    .filter(|(_, price)| *price < best.map_or(before, |(_, b)| b))
                {
                    best = Some((moves.len(), price));
                }
            }
            let count = best.map_or(0, |(count, _)| count);
            // The moves past the last that made the giver cheaper are not made: their receivers get the room
            // back.
            for &(p, r) in &moves[count..] {
                if let Some(room) = spare[r].as_mut() {
                    room.give(&self.pods[p].requests);
                }
            }
            if count == 0 {
                continue;
            }
            for &(p, r) in &moves[..count] {
                let pod = &self.pods[p];
                // A free pod adds no requirement and fits the receiver's launch type: the receiver keeps it.
                let Ok(fit) = scheduler.narrow(&self.claims[r], pod, &pod.variants[0], &[]) else {
                    if let Some(room) = spare[r].as_mut() {
                        room.give(&pod.requests);
                    }
                    continue;
                };
                self.join(r, p, fit);
                let giver = &mut self.claims[d];
                giver.pods.retain(|q| *q != p);
                giver.requests -= &pod.requests;
            }
            // The types it could launch as now: those it was opened with, in their order, that hold what it
            // keeps.
            let giver = &self.claims[d];
            let types: Vec<usize> = giver
                .admitted
                .iter()
                .copied()
                .filter(|i| choices.allowed[*i] && holds(*i, &giver.requests))
                .collect();
            launch[d] = priced(cheapest_holding(&giver.requests));
            spare[d] = launch[d].map(|(i, _)| Floor::left(&daemons.room[i], &giver.requests));
            let giver = &mut self.claims[d];
            giver.floor = scheduler.floor(giver.template, &types);
            giver.instance_types = self.lists.share(types.into());
        }
    }

    /// Whether pod `p` may move between claims without changing anything but where it runs: outside topology,
    /// with no node preferences or requirements, host ports, volumes or extended resources.
    fn movable(&self, p: usize) -> bool {
        let pod = &self.pods[p];
        self.topology.is_free(p)
            && matches!(pod.variants.as_slice(), [only] if only.is_empty())
            && pod.host_ports.is_empty()
            && pod.volume_alternatives.is_empty()
            && pod.attached.is_empty()
            && pod.requests.extended.is_empty()
    }
}

/// Per NodePool and claim requirements: the pool's types those requirements allow, with their cheapest
/// allowed price, in the order a claim picks its launch type. Claims of one workload share requirements, so
/// a few lists serve thousands of claims.
#[derive(Default)]
struct RankedByRequirements {
    /// Entries by NodePool and the requirements as written, each bucket checked for equality.
    index: HashMap<(usize, String), Vec<usize>>,
    entries: Vec<(Requirements, Choices)>,
}

/// The types some requirements allow on a NodePool: ranked with their prices, and as a mask over the catalog.
#[derive(Clone)]
struct Choices {
    ranked: Arc<[(usize, f64)]>,
    allowed: Arc<[bool]>,
}

impl RankedByRequirements {
    fn get(&mut self, solver: &Solver, t: usize, requirements: &Requirements) -> Choices {
        let bucket = self.index.entry((t, requirements.to_string())).or_default();
        if let Some(&e) = bucket.iter().find(|&&e| self.entries[e].0 == *requirements) {
            return self.entries[e].1.clone();
        }
        let scheduler = solver.scheduler;
        let types: Vec<usize> = solver.templates[t]
            .instance_types
            .iter()
            .copied()
            .filter(|i| {
                requirements.has_intersection(&scheduler.catalog.instance_types[*i].requirements)
            })
            .collect();
        let ranked = scheduler.rank(&types, requirements);
        let mut allowed = vec![false; scheduler.catalog.instance_types.len()];
        for (i, _) in &ranked {
            allowed[*i] = true;
        }
        let choices = Choices {
            ranked: ranked.into(),
            allowed: allowed.into(),
        };
        bucket.push(self.entries.len());
        self.entries.push((requirements.clone(), choices.clone()));
        choices
    }
}

/// Which catalog types `claim` was opened with, when that is not all its pool's (a pool with limits admits
/// fewer as they are used up).
fn admitted_mask(solver: &Solver, claim: &Claim) -> Option<Vec<bool>> {
    let all = &solver.templates[claim.template].instance_types;
    if Arc::ptr_eq(all, &claim.admitted) {
        return None;
    }
    let mut mask = vec![false; solver.scheduler.catalog.instance_types.len()];
    for &i in claim.admitted.iter() {
        mask[i] = true;
    }
    Some(mask)
}

/// A launch choice with a known price.
fn priced(choice: Option<(usize, f64)>) -> Option<(usize, f64)> {
    choice.filter(|(_, price)| price.is_finite())
}

/// A claim's room under its launch type, as pods move in and out.
impl Floor {
    /// What `room` leaves once `requests` are placed.
    fn left(room: &Resources, requests: &Resources) -> Floor {
        let mut left = Floor::of([room]);
        left.take(requests);
        left
    }

    fn take(&mut self, r: &Resources) {
        self.cpu -= r.cpu;
        self.memory -= r.memory;
        self.pods -= r.pods;
        self.ephemeral_storage -= r.ephemeral_storage;
    }

    fn give(&mut self, r: &Resources) {
        self.cpu += r.cpu;
        self.memory += r.memory;
        self.pods += r.pods;
        self.ephemeral_storage += r.ephemeral_storage;
    }
}
