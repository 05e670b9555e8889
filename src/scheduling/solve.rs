//! The provisioning simulation (controller-behaviour.md §1.3): pending pods, largest first, onto claims planned
//! earlier in this solve (fewest pods first), else onto a new claim from the NodePools in weight order. Pure and
//! deterministic: the same input gives the same plan.

use super::offerings::cheapest_offering;
use super::pod::PodInfo;
use super::taints::{describe, untolerated};
use super::template::Template;
use crate::api::nodepool::NodePool;
use crate::api::requirements::{AllowUndefined, Requirements};
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
        let templates = pools
            .iter()
            .filter_map(|p| Template::new(p, catalog, &allocatable).ok())
            .collect();
        Scheduler {
            catalog,
            allocatable,
            templates,
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
            templates: self.templates.clone(),
            claims: Vec::new(),
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
        let mut unschedulable = Vec::new();
        for index in queue {
            let pod = &pods[index];
            if let Err(reason) = solver.place(pod, index) {
                unschedulable.push(Unschedulable {
                    pod: pod.key.clone(),
                    reason,
                });
            }
        }
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
                    .fresh_claim(t, template.instance_types.clone(), pod, requirements, false)
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
        let (requirements, instance_types) = self.narrow(&empty, pod, requirements)?;
        Ok(Claim {
            requirements,
            instance_types,
            requests: pod.requests.clone(),
            ..empty
        })
    }

    /// The claim's requirements and instance types with the pod added, or why the pod does not fit.
    fn narrow(
        &self,
        claim: &Claim,
        pod: &PodInfo,
        requirements: &Requirements,
    ) -> Result<(Requirements, Vec<usize>), String> {
        claim
            .requirements
            .compatible(requirements, AllowUndefined::well_known_labels())
            .map_err(|why| format!("incompatible requirements, {why}"))?;
        let mut merged = claim.requirements.clone();
        merged.add_all(requirements);
        let total = claim.requests.clone() + &pod.requests;
        let narrowed = !requirements.is_empty();
        let types: Vec<usize> = claim
            .instance_types
            .iter()
            .copied()
            .filter(|i| total.fits_in(&self.allocatable[*i]))
            .filter(|i| {
                let it = &self.catalog.instance_types[*i];
                !narrowed
                    || (merged.intersects(&it.requirements).is_ok()
                        && cheapest_offering(it, &merged).is_some())
            })
            .collect();
        if types.is_empty() {
            return Err(format!(
                "no instance type fits requests {} with the requirements {}",
                describe_requests(&total),
                merged
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

/// One solve: the claims it plans, and what is left of each pool's limits.
struct Solver<'s, 'a> {
    scheduler: &'s Scheduler<'a>,
    templates: Vec<Template>,
    claims: Vec<Claim>,
}

/// Plans NodeClaims for `pods` over `nodepools` and the `catalog`.
pub fn solve(pods: &[PodInfo], nodepools: &[NodePool], catalog: &Catalog) -> Plan {
    Scheduler::new(nodepools, catalog).solve(pods)
}

impl Solver<'_, '_> {
    /// Tries the pod's requirement variants strictest first, PreferNoSchedule taints binding until the last try.
    fn place(&mut self, pod: &PodInfo, index: usize) -> Result<(), String> {
        let last = pod.variants.len().saturating_sub(1);
        let attempts = pod
            .variants
            .iter()
            .map(|v| (v, true))
            .chain(pod.variants.get(last).map(|v| (v, false)));
        let mut reason = String::from("the pod has no requirement set");
        for (requirements, soft_taints_bind) in attempts {
            match self.place_with(pod, index, requirements, soft_taints_bind) {
                Ok(()) => return Ok(()),
                Err(why) => reason = why,
            }
        }
        Err(reason)
    }

    fn place_with(
        &mut self,
        pod: &PodInfo,
        index: usize,
        requirements: &Requirements,
        soft: bool,
    ) -> Result<(), String> {
        // Claims planned earlier, fewest pods first (then oldest).
        let mut order: Vec<usize> = (0..self.claims.len()).collect();
        order.sort_by_key(|c| (self.claims[*c].pods.len(), *c));
        for c in order {
            let template = &self.templates[self.claims[c].template];
            if untolerated(&pod.tolerations, &template.taints, soft).is_some() {
                continue;
            }
            if let Ok((merged, types)) = self.scheduler.narrow(&self.claims[c], pod, requirements) {
                let claim = &mut self.claims[c];
                claim.requirements = merged;
                claim.instance_types = types;
                claim.requests += &pod.requests;
                claim.pods.push(index);
                return Ok(());
            }
        }
        let mut reasons = Vec::new();
        for t in 0..self.templates.len() {
            match self.open_claim(t, pod, index, requirements, soft) {
                Ok(()) => return Ok(()),
                Err(why) => reasons.push(format!("nodepool {}: {why}", self.templates[t].nodepool)),
            }
        }
        if reasons.is_empty() {
            return Err("no nodepool can launch nodes".to_owned());
        }
        Err(reasons.join("; "))
    }

    /// A new claim from template `t` holding the pod, if the pool (and what is left of its limits) can take it.
    fn open_claim(
        &mut self,
        t: usize,
        pod: &PodInfo,
        index: usize,
        requirements: &Requirements,
        soft: bool,
    ) -> Result<(), String> {
        let scheduler = self.scheduler;
        let template = &self.templates[t];
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
        let mut claim = scheduler.fresh_claim(t, instance_types, pod, requirements, soft)?;
        claim.pods.push(index);
        // A new claim uses up the largest capacity it might launch with: pessimistic, as Karpenter is.
        if let Some(left) = self.templates[t].remaining.as_mut() {
            left.consume(&largest_capacity(scheduler.catalog, &claim.instance_types));
        }
        self.claims.push(claim);
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

/// The largest amount of each core resource among `instance_types`: what a claim might take off a limit.
fn largest_capacity(catalog: &Catalog, instance_types: &[usize]) -> Resources {
    instance_types
        .iter()
        .map(|i| &catalog.instance_types[*i].capacity)
        .fold(Resources::default(), |max, c| Resources {
            cpu: max.cpu.max(c.cpu),
            memory: max.memory.max(c.memory),
            pods: max.pods.max(c.pods),
            ephemeral_storage: max.ephemeral_storage.max(c.ephemeral_storage),
            extended: max.extended,
        })
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
