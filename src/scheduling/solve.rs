//! The provisioning simulation (controller-behaviour.md §1.3): pending pods, largest first, onto claims planned
//! earlier in this solve (fewest pods first), else onto a new claim from the NodePools in weight order. Pure and
//! deterministic: the same input gives the same plan.

use super::offerings::{allows, cheapest_offering};
use super::pod::PodInfo;
use super::taints::{describe, untolerated};
use super::template::Template;
use super::topology::{Domains, Narrowing, Relax, Relaxed, Topology, TopologyKey};
use crate::api::nodepool::{NodePool, TaintEffect};
use crate::api::requirements::{AllowUndefined, Requirement, Requirements};
use crate::catalog::{CapacityType, Catalog, Resources};
use std::cmp::Reverse;

/// Karpenter writes at most this many instance types into a NodeClaim.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// A NodeClaim the solve decided to create.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedClaim {
    pub nodepool: String,
    /// The pool's requirements narrowed by the pods.
    pub requirements: Requirements,
    /// The types that fit every pod, cheapest first, at most [`MAX_INSTANCE_TYPES`].
    pub instance_types: Vec<String>,
    /// `namespace/name` of each pod, in placement order.
    pub pods: Vec<String>,
    /// The sum of the pods' requests.
    pub requests: Resources,
    /// What a launch would most likely pick: the cheapest allowed offering.
    pub cheapest: Option<Choice>,
}

/// One instance type in one zone with one capacity type.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub instance_type: String,
    pub capacity_type: CapacityType,
    pub zone: String,
    /// USD per hour; `None` when no price is known.
    pub price: Option<f64>,
}

/// A pod the solve could not place, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub claims: Vec<PlannedClaim>,
    pub unschedulable: Vec<Unschedulable>,
}

/// A claim being filled during the solve.
struct Claim {
    template: usize,
    requirements: Requirements,
    /// Catalog indices of the types still possible, in the template's price order.
    instance_types: Vec<usize>,
    requests: Resources,
    pods: Vec<usize>,
}

/// NodePools prepared against a catalog: built once, then used for any number of solves and pod advice.
pub struct Scheduler<'a> {
    catalog: &'a Catalog,
    allocatable: Vec<Resources>,
    templates: Vec<Template>,
    /// Per template: the zones and the capacity types its instance types offer (topology domains).
    domains: Vec<[Vec<String>; 2]>,
    /// Whether some pool has a `PreferNoSchedule` taint (relaxation step 6 applies).
    soft_taints: bool,
}

/// What one NodePool offers a pod: the instance types that fit it, or why none does.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolOption {
    pub nodepool: String,
    pub fit: Result<PoolFit, String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PoolFit {
    /// How many instance types of the pool could run the pod.
    pub instance_types: usize,
    pub cheapest: Option<Choice>,
}

impl<'a> Scheduler<'a> {
    /// Prepares `nodepools` (static and deleting pools dropped, weight order) over `catalog`.
    pub fn new(nodepools: &[NodePool], catalog: &'a Catalog) -> Self {
        let allocatable: Vec<Resources> = catalog
            .instance_types
            .iter()
            .map(|it| it.allocatable())
            .collect();
        let mut pools: Vec<&NodePool> = nodepools
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && p.spec.replicas.is_none())
            .collect();
        // Weight descending (absent = 0), ties by name in reverse lexical order, as Karpenter orders them.
        pools.sort_by_key(|p| {
            (
                Reverse(p.spec.weight.unwrap_or(0)),
                Reverse(p.metadata.name.clone()),
            )
        });
        let templates: Vec<Template> = pools
            .iter()
            .filter_map(|p| Template::new(p, catalog, &allocatable).ok())
            .collect();
        let domains = templates
            .iter()
            .map(|t| {
                let mut zones = std::collections::BTreeSet::new();
                let mut capacity_types = std::collections::BTreeSet::new();
                for i in &t.instance_types {
                    for o in &catalog.instance_types[*i].offerings {
                        if allows(&t.requirements, o) {
                            zones.insert(o.zone.clone());
                            capacity_types.insert(o.capacity_type.as_str().to_owned());
                        }
                    }
                }
                [
                    zones.into_iter().collect(),
                    capacity_types.into_iter().collect(),
                ]
            })
            .collect();
        let soft_taints = templates.iter().any(|t| {
            t.taints
                .iter()
                .any(|taint| taint.effect == TaintEffect::PreferNoSchedule)
        });
        Scheduler {
            catalog,
            allocatable,
            templates,
            domains,
            soft_taints,
        }
    }

    /// The prepared NodePools, in the order they are tried.
    pub fn templates(&self) -> &[Template] {
        &self.templates
    }

    /// Plans NodeClaims for `pods`.
    pub fn solve(&self, pods: &[PodInfo]) -> Plan {
        let mut solver = Solver {
            scheduler: self,
            pods,
            templates: self.templates.clone(),
            claims: Vec::new(),
            order: Vec::new(),
            topology: Topology::new(pods),
        };
        // Largest first: CPU, then memory, then oldest, then UID.
        let mut queue: Vec<usize> = (0..pods.len()).collect();
        queue.sort_by_key(|i| {
            let p = &pods[*i];
            (
                Reverse(p.requests.cpu),
                Reverse(p.requests.memory),
                &p.created,
                &p.uid,
            )
        });
        // Pods that fail are retried after the others until a full pass places nothing (affinity ordering).
        let mut reasons: Vec<String> = vec![String::new(); pods.len()];
        loop {
            let mut failed = Vec::new();
            for &index in &queue {
                if let Err(reason) = solver.place(index) {
                    reasons[index] = reason;
                    failed.push(index);
                }
            }
            let progress = failed.len() < queue.len();
            queue = failed;
            if queue.is_empty() || !progress {
                break;
            }
        }
        let unschedulable = queue
            .into_iter()
            .map(|index| Unschedulable {
                pod: pods[index].key.clone(),
                reason: std::mem::take(&mut reasons[index]),
            })
            .collect();
        Plan {
            claims: solver
                .claims
                .iter()
                .map(|c| solver.finish(c, pods))
                .collect(),
            unschedulable,
        }
    }

    /// What each NodePool, in the order they are tried, offers `pod` on a new node with every preference
    /// relaxed: how many types fit and the cheapest, or why the pool cannot take it.
    pub fn options(&self, pod: &PodInfo) -> Vec<PoolOption> {
        let Some(requirements) = pod.variants.last() else {
            return Vec::new();
        };
        self.templates
            .iter()
            .enumerate()
            .map(|(t, template)| {
                let fit = self
                    .fresh_claim(
                        t,
                        template.instance_types.clone(),
                        pod,
                        requirements,
                        &[],
                        false,
                    )
                    .map(|claim| {
                        let ranked = self.ranked(&claim);
                        PoolFit {
                            instance_types: ranked.len(),
                            cheapest: self.choice(&claim, &ranked),
                        }
                    });
                PoolOption {
                    nodepool: template.nodepool.clone(),
                    fit,
                }
            })
            .collect()
    }

    /// A new claim from template `t` (restricted to `instance_types`) holding `pod`, or why it cannot.
    fn fresh_claim(
        &self,
        t: usize,
        instance_types: Vec<usize>,
        pod: &PodInfo,
        requirements: &Requirements,
        extra: &[Requirement],
        soft: bool,
    ) -> Result<Claim, String> {
        let template = &self.templates[t];
        if let Some(why) = &template.unusable {
            return Err(why.clone());
        }
        if let Some(taint) = untolerated(&pod.tolerations, &template.taints, soft) {
            return Err(format!("did not tolerate taint {}", describe(taint)));
        }
        let empty = Claim {
            template: t,
            requirements: template.requirements.clone(),
            instance_types,
            requests: Resources::default(),
            pods: Vec::new(),
        };
        let (requirements, instance_types) = self.narrow(&empty, pod, requirements, extra)?;
        Ok(Claim {
            requirements: requirements.unwrap_or(empty.requirements.clone()),
            instance_types,
            requests: pod.requests.clone(),
            ..empty
        })
    }

    /// The claim's requirements (`None` when unchanged) and instance types with the pod and the topology
    /// narrowing `extra` added, or why the pod does not fit.
    fn narrow(
        &self,
        claim: &Claim,
        pod: &PodInfo,
        requirements: &Requirements,
        extra: &[Requirement],
    ) -> Result<(Option<Requirements>, Vec<usize>), String> {
        let narrowed = !requirements.is_empty() || !extra.is_empty();
        let merged = if narrowed {
            claim
                .requirements
                .compatible(requirements, AllowUndefined::well_known_labels())
                .map_err(|why| format!("incompatible requirements, {why}"))?;
            let mut merged = claim.requirements.clone();
            merged.add_all(requirements);
            for r in extra {
                merged.add(r.clone());
            }
            Some(merged)
        } else {
            None
        };
        let total = claim.requests.clone() + &pod.requests;
        let types: Vec<usize> = claim
            .instance_types
            .iter()
            .copied()
            .filter(|i| total.fits_in(&self.allocatable[*i]))
            .filter(|i| {
                let it = &self.catalog.instance_types[*i];
                merged.as_ref().is_none_or(|merged| {
                    merged.intersects(&it.requirements).is_ok()
                        && cheapest_offering(it, merged).is_some()
                })
            })
            .collect();
        if types.is_empty() {
            return Err(format!(
                "no instance type fits requests {} with the requirements {}",
                describe_requests(&total),
                merged.as_ref().unwrap_or(&claim.requirements)
            ));
        }
        Ok((merged, types))
    }

    /// The claim's instance types with their cheapest allowed price, cheapest first.
    fn ranked(&self, claim: &Claim) -> Vec<(usize, f64)> {
        let mut ranked: Vec<(usize, f64)> = claim
            .instance_types
            .iter()
            .filter_map(|i| {
                let it = &self.catalog.instance_types[*i];
                cheapest_offering(it, &claim.requirements)
                    .map(|o| (*i, o.price.unwrap_or(f64::INFINITY)))
            })
            .collect();
        ranked
            .sort_by(|(a, pa), (b, pb)| pa.total_cmp(pb).then_with(|| self.smaller_first(*a, *b)));
        ranked
    }

    /// Among equal prices (unknown ones included), the smaller type first, then the catalog order.
    fn smaller_first(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let size = |i: usize| {
            let capacity = &self.catalog.instance_types[i].capacity;
            (capacity.cpu, capacity.memory)
        };
        size(a).cmp(&size(b)).then(a.cmp(&b))
    }

    fn choice(&self, claim: &Claim, ranked: &[(usize, f64)]) -> Option<Choice> {
        let it = &self.catalog.instance_types[ranked.first()?.0];
        cheapest_offering(it, &claim.requirements).map(|o| Choice {
            instance_type: it.name.clone(),
            capacity_type: o.capacity_type,
            zone: o.zone.clone(),
            price: o.price,
        })
    }
}

/// One solve: the claims it plans, what is left of each pool's limits, and the topology counts.
struct Solver<'s, 'a> {
    scheduler: &'s Scheduler<'a>,
    pods: &'s [PodInfo],
    templates: Vec<Template>,
    claims: Vec<Claim>,
    /// Claim indices, fewest pods first, then oldest: the order planned claims are tried in.
    order: Vec<usize>,
    topology: Topology,
}

/// Plans NodeClaims for `pods` over `nodepools` and the `catalog`.
pub fn solve(pods: &[PodInfo], nodepools: &[NodePool], catalog: &Catalog) -> Plan {
    Scheduler::new(nodepools, catalog).solve(pods)
}

/// The keys whose domains are label values, with their index into `Scheduler::domains`.
const VALUE_KEYS: [(TopologyKey, usize); 2] =
    [(TopologyKey::Zone, 0), (TopologyKey::CapacityType, 1)];

impl<'s> Solver<'s, '_> {
    /// Tries pod `index` with the relaxation order of controller-behaviour.md §1.4: required terms in turn,
    /// then preferred pod affinity, pod anti-affinity, node affinity and `ScheduleAnyway` spread dropped one at
    /// a time, then `PreferNoSchedule` taints tolerated.
    fn place(&mut self, index: usize) -> Result<(), String> {
        let pod = &self.pods[index];
        if pod.variants.is_empty() {
            return Err(String::from("the pod has no requirement set"));
        }
        let count = |f: fn(Relax) -> bool| pod.topology.iter().filter(|c| f(c.relax)).count();
        let affinity = count(|r| matches!(r, Relax::PreferredAffinity(_)));
        let anti = count(|r| matches!(r, Relax::PreferredAntiAffinity(_)));
        let anyway = count(|r| matches!(r, Relax::ScheduleAnyway(_)));
        let terms = pod.required_terms.max(1);
        let last_term = terms - 1;
        let last = pod.variants.len() - 1;
        let mut attempts: Vec<(usize, Relaxed, bool)> = Vec::new();
        let mut relaxed = Relaxed::default();
        attempts.extend((0..terms).map(|v| (v, relaxed, true)));
        for k in 1..=affinity {
            relaxed.affinity = k;
            attempts.push((last_term, relaxed, true));
        }
        for k in 1..=anti {
            relaxed.anti_affinity = k;
            attempts.push((last_term, relaxed, true));
        }
        attempts.extend((terms..pod.variants.len()).map(|v| (v, relaxed, true)));
        for k in 1..=anyway {
            relaxed.schedule_anyway = k;
            attempts.push((last, relaxed, true));
        }
        if self.scheduler.soft_taints {
            attempts.push((last, relaxed, false));
        }
        let mut reason = String::new();
        for (variant, relaxed, soft) in attempts {
            match self.place_with(index, variant, relaxed, soft) {
                Ok(()) => return Ok(()),
                Err(why) => reason = why,
            }
        }
        Err(reason)
    }

    /// What pod `p`'s zone and capacity-type constraints allow on template `t`, or the constraint that cannot be
    /// met. The same for every claim of the template; each claim then keeps the domains it still allows.
    fn narrowings(
        &self,
        p: usize,
        t: usize,
        requirements: &Requirements,
        relaxed: Relaxed,
    ) -> Result<Vec<Narrowing<'s>>, String> {
        let scheduler: &'s Scheduler<'_> = self.scheduler;
        let mut out = Vec::new();
        for (key, k) in VALUE_KEYS {
            if !self.topology.touches(p, key) {
                continue;
            }
            let theirs = requirements.get(key.label());
            let domains = Domains {
                key,
                eligible: scheduler.domains[t][k]
                    .iter()
                    .map(String::as_str)
                    .filter(|d| theirs.is_none_or(|r| r.has(d)))
                    .collect(),
            };
            if let Some(n) = self.topology.narrowing(self.pods, p, relaxed, &domains)? {
                if n.single || !n.all {
                    out.push(n);
                }
            }
        }
        Ok(out)
    }

    fn place_with(
        &mut self,
        index: usize,
        variant: usize,
        relaxed: Relaxed,
        soft: bool,
    ) -> Result<(), String> {
        let pod = &self.pods[index];
        let requirements = &pod.variants[variant];
        let well_known = AllowUndefined::well_known_labels();
        // Per template, computed on first use: the zone and capacity-type narrowings.
        let mut narrowings: Vec<Option<Result<Vec<Narrowing<'s>>, String>>> =
            vec![None; self.templates.len()];
        // Claims planned earlier, fewest pods first (then oldest).
        let mut placed = None;
        for &c in &self.order {
            let claim = &self.claims[c];
            let template = &self.templates[claim.template];
            if untolerated(&pod.tolerations, &template.taints, soft).is_some()
                || !self.topology.host_ok(self.pods, index, relaxed, c)
                || !claim.requirements.is_compatible(requirements, well_known)
            {
                continue;
            }
            let Ok(narrowing) = narrowings[claim.template]
                .get_or_insert_with(|| {
                    self.narrowings(index, claim.template, requirements, relaxed)
                })
                .as_ref()
            else {
                continue;
            };
            for extra in combine(narrowing, &claim.requirements) {
                if let Ok(fit) = self.scheduler.narrow(claim, pod, requirements, &extra) {
                    placed = Some((c, fit));
                    break;
                }
            }
            if placed.is_some() {
                break;
            }
        }
        if let Some((c, (merged, types))) = placed {
            let claim = &mut self.claims[c];
            if let Some(merged) = merged {
                claim.requirements = merged;
            }
            claim.instance_types = types;
            claim.requests += &pod.requests;
            claim.pods.push(index);
            self.reorder(c);
            self.record(index, c);
            return Ok(());
        }
        let mut reasons = Vec::new();
        for t in 0..self.templates.len() {
            match self.open_claim(t, index, requirements, relaxed, soft) {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(format!("nodepool {}: {why}", self.templates[t].nodepool)),
            }
        }
        if reasons.is_empty() {
            return Err("no nodepool can launch nodes".to_owned());
        }
        Err(reasons.join("; "))
    }

    /// Moves claim `c`, which just took a pod, to its place in `order` (fewest pods, then oldest).
    fn reorder(&mut self, c: usize) {
        let claims = &self.claims;
        let key = |c: usize| (claims[c].pods.len(), c);
        let before = (claims[c].pods.len() - 1, c);
        let from = self.order.partition_point(|&o| key(o) < before);
        if self.order.get(from) == Some(&c) {
            self.order.remove(from);
        }
        let to = self.order.partition_point(|&o| key(o) < key(c));
        self.order.insert(to, c);
    }

    /// Counts pod `p`, just placed on claim `c`, in the topology groups.
    fn record(&mut self, p: usize, c: usize) {
        let claim = &self.claims[c];
        let domains = &self.scheduler.domains[claim.template];
        let requirements = &claim.requirements;
        let values = |key: TopologyKey| {
            let k = usize::from(key == TopologyKey::CapacityType);
            domains[k]
                .iter()
                .map(String::as_str)
                .filter(|d| requirements.get(key.label()).is_none_or(|r| r.has(d)))
                .collect()
        };
        self.topology.record(self.pods, p, c, values, requirements);
    }

    /// A new claim from template `t` holding the pod, if the pool (and what is left of its limits) can take it.
    fn open_claim(
        &mut self,
        t: usize,
        index: usize,
        requirements: &Requirements,
        relaxed: Relaxed,
        soft: bool,
    ) -> Result<(), String> {
        let scheduler = self.scheduler;
        let pod = &self.pods[index];
        let template = &self.templates[t];
        if template.unusable.is_none() {
            self.topology
                .host_allows(self.pods, index, relaxed, self.claims.len())?;
        }
        let instance_types = match &template.remaining {
            Some(left) if template.unusable.is_none() => {
                if let Some(limit) = left.exhausted() {
                    return Err(format!(
                        "{limit} limit has been exhausted for nodepool {}",
                        template.nodepool
                    ));
                }
                let admitted: Vec<usize> = template
                    .instance_types
                    .iter()
                    .copied()
                    .filter(|i| left.admits(&scheduler.catalog.instance_types[*i].capacity))
                    .collect();
                if admitted.is_empty() {
                    return Err(format!(
                        "all available instance types exceed limits for nodepool {}",
                        template.nodepool
                    ));
                }
                admitted
            }
            _ => template.instance_types.clone(),
        };
        let alternatives = if template.unusable.is_none() {
            let narrowing = self.narrowings(index, t, requirements, relaxed)?;
            combine(&narrowing, &template.requirements)
        } else {
            vec![Vec::new()]
        };
        let mut result = Err(String::new());
        for extra in &alternatives {
            result =
                scheduler.fresh_claim(t, instance_types.clone(), pod, requirements, extra, soft);
            if result.is_ok() {
                break;
            }
        }
        let mut claim = result?;
        claim.pods.push(index);
        // A new claim uses up the largest capacity it might launch with: pessimistic, as Karpenter is.
        if let Some(left) = self.templates[t].remaining.as_mut() {
            left.consume(&largest_capacity(scheduler.catalog, &claim.instance_types));
        }
        self.claims.push(claim);
        let c = self.claims.len() - 1;
        self.reorder(c);
        self.record(index, c);
        Ok(())
    }
    fn finish(&self, claim: &Claim, pods: &[PodInfo]) -> PlannedClaim {
        let scheduler = self.scheduler;
        let ranked = scheduler.ranked(claim);
        PlannedClaim {
            nodepool: self.templates[claim.template].nodepool.clone(),
            requirements: claim.requirements.clone(),
            instance_types: ranked
                .iter()
                .take(MAX_INSTANCE_TYPES)
                .map(|(i, _)| scheduler.catalog.instance_types[*i].name.clone())
                .collect(),
            pods: claim.pods.iter().map(|p| pods[*p].key.clone()).collect(),
            requests: claim.requests.clone(),
            cheapest: scheduler.choice(claim, &ranked),
        }
    }
}

/// The largest amount of each resource among `instance_types`: what a claim might take off a limit.
fn largest_capacity(catalog: &Catalog, instance_types: &[usize]) -> Resources {
    instance_types
        .iter()
        .map(|i| &catalog.instance_types[*i].capacity)
        .fold(Resources::default(), |max, c| max.max(c))
}

/// `cpu 1500m, memory 2Gi, pods 3`: the requests in the words a user wrote them.
fn describe_requests(requests: &Resources) -> String {
    requests
        .to_quantities()
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The topology requirements to try on a claim with `requirements`, preferred first: one empty set when nothing
/// narrows, none when the claim allows no domain the constraints do.
fn combine(narrowings: &[Narrowing], requirements: &Requirements) -> Vec<Vec<Requirement>> {
    let mut alternatives: Vec<Vec<Requirement>> = vec![Vec::new()];
    for n in narrowings {
        let options = n.alternatives(requirements.get(n.key.label()));
        alternatives = alternatives
            .iter()
            .flat_map(|base| {
                options.iter().map(move |o| {
                    let mut next = base.clone();
                    next.push(o.clone());
                    next
                })
            })
            .collect();
    }
    alternatives
}
