//! The provisioning simulation (controller-behaviour.md §1.3): pending pods, largest first, onto existing nodes
//! (initialized first, then by name), else onto claims planned earlier in this solve (fewest pods first), else
//! onto a new claim from the NodePools in weight order. Pure and deterministic: the same input gives the same
//! plan.

use super::cluster::{Cluster, DaemonSetPod, ExistingNode};
use super::daemons::{self, DaemonGroups};
use super::effective_zone::effective_zone;
use super::min_values::{self, MinValuesPolicy};
use super::offerings::{allows, cheapest_offering, OfferingBits};
use super::pod::{ports_clash, HostPort, PodInfo};
use super::reservations::{Reservations, ReservedMode};
use super::taints::{describe, untolerated};
use super::template::Template;
use super::topology::{
    single_value, Bound, Domains, Host, Narrowing, Relax, Relaxed, Topology, TopologyKey, Universe,
};
use super::type_name::TypeName;
use super::volumes::AttachedVolume;
use crate::api::labels;
use crate::api::nodepool::{NodePool, TaintEffect};
use crate::api::requirements::{AllowUndefined, Requirement, Requirements};
use crate::catalog::{CapacityType, Catalog, InstanceType, Resources};
use std::borrow::Cow;
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
    pub instance_types: Vec<TypeName>,
    /// `namespace/name` of each pod, in placement order.
    pub pods: Vec<String>,
    /// The sum of the pods' requests and the smallest DaemonSet overhead among the instance types.
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

impl Choice {
    /// The cheapest offering of `it` that `requirements` allow (unknown prices last).
    pub fn cheapest(it: &InstanceType, requirements: &Requirements) -> Option<Choice> {
        cheapest_offering(it, requirements).map(|o| Choice {
            instance_type: it.name.clone(),
            capacity_type: o.capacity_type,
            zone: o.zone.clone(),
            price: o.price,
        })
    }
}

/// A pod the solve could not place, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unschedulable {
    pub pod: String,
    pub reason: String,
    /// The pod waits for reserved capacity this solve's claims hold: its decision is deferred to the next solve,
    /// not failed (Karpenter neither counts it as unschedulable nor publishes an Event for it).
    pub deferred: bool,
}

impl Unschedulable {
    /// A pod that cannot be placed, and why.
    pub fn new(pod: impl Into<String>, reason: impl Into<String>) -> Self {
        Unschedulable {
            pod: pod.into(),
            reason: reason.into(),
            deferred: false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    pub claims: Vec<PlannedClaim>,
    /// The existing nodes that take pods, in the order they were tried.
    pub existing: Vec<NodePlacement>,
    pub unschedulable: Vec<Unschedulable>,
    /// Per pod of the solve, in order, the zone its constraints hold it to before anything is placed
    /// ([`effective_zone`](super::effective_zone::effective_zone)).
    pub effective_zones: Vec<String>,
}

/// Pods the solve places onto an existing node (or in-flight NodeClaim).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodePlacement {
    pub node: String,
    /// `namespace/name` of each pod, in placement order.
    pub pods: Vec<String>,
}

/// A claim being filled during the solve.
struct Claim {
    template: usize,
    requirements: Requirements,
    /// Catalog indices of the types still possible, in the template's price order.
    instance_types: Vec<usize>,
    requests: Resources,
    pods: Vec<usize>,
    /// The host ports its pods bind.
    ports: Vec<HostPort>,
    /// The least room among its instance types.
    floor: Floor,
    /// Per label key of the solve ([`SolveDomains::keys`]): the domains its requirements still allow, as
    /// [`domain_bits`] over its template's.
    domains: Vec<u64>,
}

/// The least room (allocatable minus daemon overhead) among a claim's instance types, in the core resources: a
/// pod whose requests fit under it, with no extended resources, host ports or requirements, keeps every type.
#[derive(Clone, Copy, Debug, Default)]
struct Floor {
    cpu: i64,
    memory: i64,
    pods: i64,
    ephemeral_storage: i64,
}

impl Floor {
    fn of<'r>(rooms: impl IntoIterator<Item = &'r Resources>) -> Floor {
        rooms
            .into_iter()
            .map(|r| Floor {
                cpu: r.cpu,
                memory: r.memory,
                pods: r.pods,
                ephemeral_storage: r.ephemeral_storage,
            })
            .reduce(|a, b| Floor {
                cpu: a.cpu.min(b.cpu),
                memory: a.memory.min(b.memory),
                pods: a.pods.min(b.pods),
                ephemeral_storage: a.ephemeral_storage.min(b.ephemeral_storage),
            })
            .unwrap_or_default()
    }

    fn holds(&self, total: &Resources) -> bool {
        total.extended.is_empty()
            && total.cpu <= self.cpu
            && total.memory <= self.memory
            && total.pods <= self.pods
            && total.ephemeral_storage <= self.ephemeral_storage
    }
}

/// NodePools prepared against a catalog: built once, then used for any number of solves and pod advice.
pub struct Scheduler<'a> {
    catalog: &'a Catalog,
    prepared: Cow<'a, Prepared>,
    min_values: MinValuesPolicy,
    reserved: ReservedMode,
}

/// What a [`Scheduler`] derives from its NodePools, catalog and DaemonSets before any pod: kept apart so that a
/// caller solving again with the same three (the provisioner, batch after batch) prepares them once. It holds
/// catalog indices, so it is only valid with the catalog it was prepared against.
#[derive(Clone, Debug)]
pub struct Prepared {
    templates: Vec<Template>,
    /// Per template: the zones and the capacity types its instance types offer (topology domains).
    domains: Vec<[Vec<String>; 2]>,
    /// Whether some pool has a `PreferNoSchedule` taint (relaxation step 6 applies).
    soft_taints: bool,
    daemonsets: Vec<DaemonSetPod>,
    /// Per template: its instance types grouped by DaemonSet overhead.
    daemons: Vec<DaemonGroups>,
    /// The catalog's offerings as bits, when it has few enough zones.
    offering_bits: Option<OfferingBits>,
    /// The catalog's type names, by catalog index, shared by the planned claims that list them.
    names: Vec<TypeName>,
    /// The catalog's capacity reservations, none taken yet.
    reservations: Reservations,
    /// The label keys a NodePool template or an in-flight claim leaves open: the well-known labels and those
    /// the catalog's instance types define (Karpenter's providers register their types' labels as well-known).
    allow: AllowUndefined,
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

impl Prepared {
    /// Prepares `nodepools` (static and deleting pools dropped, weight order) over `catalog`; every node runs
    /// the `daemonsets` that tolerate and match it.
    pub fn new(nodepools: &[NodePool], catalog: &Catalog, daemonsets: &[DaemonSetPod]) -> Self {
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
            .map(|t| offering_domains(catalog, t, &t.instance_types))
            .collect();
        let soft_taints = templates.iter().any(|t| {
            t.taints
                .iter()
                .any(|taint| taint.effect == TaintEffect::PreferNoSchedule)
        });
        let allow = AllowUndefined::from_keys(
            labels::well_known_labels()
                .iter()
                .map(String::as_str)
                .chain(catalog.label_keys()),
        );
        let daemons = templates
            .iter()
            .map(|t| DaemonGroups::new(t, daemonsets, catalog, &allocatable, &allow))
            .collect();
        Prepared {
            templates,
            domains,
            soft_taints,
            daemonsets: daemonsets.to_vec(),
            daemons,
            offering_bits: OfferingBits::new(catalog),
            reservations: Reservations::new(catalog),
            allow,
            names: catalog
                .instance_types
                .iter()
                .map(|it| TypeName::new(&it.name))
                .collect(),
        }
    }
}

impl<'a> Scheduler<'a> {
    /// Prepares `nodepools` (static and deleting pools dropped, weight order) over `catalog`, with no
    /// DaemonSets.
    pub fn new(nodepools: &[NodePool], catalog: &'a Catalog) -> Self {
        Self::with_daemonsets(nodepools, catalog, &[])
    }

    /// Prepares `nodepools` over `catalog`; every node runs the `daemonsets` that tolerate and match it.
    pub fn with_daemonsets(
        nodepools: &[NodePool],
        catalog: &'a Catalog,
        daemonsets: &[DaemonSetPod],
    ) -> Self {
        Scheduler {
            catalog,
            prepared: Cow::Owned(Prepared::new(nodepools, catalog, daemonsets)),
            min_values: MinValuesPolicy::default(),
            reserved: ReservedMode::default(),
        }
    }

    /// A scheduler over `catalog` with the NodePools and DaemonSets `prepared` against that same catalog.
    pub fn prepared(catalog: &'a Catalog, prepared: &'a Prepared) -> Self {
        Scheduler {
            catalog,
            prepared: Cow::Borrowed(prepared),
            min_values: MinValuesPolicy::default(),
            reserved: ReservedMode::default(),
        }
    }

    /// Sets what happens when a claim cannot keep a NodePool's `minValues` (Karpenter's `MIN_VALUES_POLICY`).
    pub fn with_min_values_policy(mut self, policy: MinValuesPolicy) -> Self {
        self.min_values = policy;
        self
    }

    /// Sets what happens when reserved capacity a pod could use is all taken in this solve ([`ReservedMode`]).
    pub fn with_reserved_mode(mut self, mode: ReservedMode) -> Self {
        self.reserved = mode;
        self
    }

    /// The prepared NodePools, in the order they are tried.
    pub fn templates(&self) -> &[Template] {
        &self.prepared.templates
    }

    /// Plans NodeClaims for `pods` in an empty cluster.
    pub fn solve(&self, pods: &[PodInfo]) -> Plan {
        self.solve_on(pods, &[])
    }

    /// Plans where `pods` go: onto the existing `nodes` first, else onto new NodeClaims.
    pub fn solve_on(&self, pods: &[PodInfo], nodes: &[ExistingNode]) -> Plan {
        let mut order: Vec<&ExistingNode> = nodes.iter().collect();
        order.sort_by(|a, b| (!a.initialized, &a.name).cmp(&(!b.initialized, &b.name)));
        let nodes: Vec<NodeState> = order.into_iter().map(|n| self.node_state(n)).collect();
        let bound: Vec<Bound> = nodes
            .iter()
            .enumerate()
            .flat_map(|(host, state)| {
                let node = state.host();
                state.node.pods.iter().map(move |b| Bound {
                    pod: &b.pod,
                    host,
                    node,
                })
            })
            .collect();
        let mut templates = self.prepared.templates.clone();
        for template in &mut templates {
            if let Some(left) = template.remaining.as_mut() {
                for state in nodes
                    .iter()
                    .filter(|s| s.node.nodepool.as_ref() == Some(&template.nodepool))
                {
                    left.consume(&state.node.capacity);
                }
            }
        }
        let domains = self.solve_domains(pods, &bound, &nodes);
        let mut universe = Universe::default();
        for (k, key) in domains.keys.iter().enumerate() {
            let offered = universe.offered.entry(key.clone()).or_default();
            for (t, template) in self.prepared.templates.iter().enumerate() {
                offered.extend(
                    domains.per_template[t][k]
                        .iter()
                        .map(|d| (d.as_str(), template.taints.as_slice())),
                );
                // Types the pool's limits keep it from launching still give it domains (Karpenter counts every
                // type of every ready pool); they are no domain a new claim could take, so only here.
                offered.extend(
                    domains.over_limits[t][k]
                        .iter()
                        .map(|d| (d.as_str(), template.taints.as_slice())),
                );
            }
        }
        universe.nodes = nodes
            .iter()
            .filter(|s| !s.node.in_flight)
            .map(NodeState::host)
            .collect();
        let topology = Topology::new(pods, &bound, nodes.len(), &universe);
        let mut solver = Solver {
            scheduler: self,
            pods,
            templates,
            claims: Vec::new(),
            order: Vec::new(),
            topology,
            nodes,
            domains: &domains,
            reservations: self.prepared.reservations.clone(),
        };
        let effective_zones = (0..pods.len()).map(|p| solver.effective_zone(p)).collect();
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
        let mut deferred = vec![false; pods.len()];
        loop {
            let mut failed = Vec::new();
            for &index in &queue {
                if let Err(miss) = solver.place(index) {
                    (reasons[index], deferred[index]) = match miss {
                        Miss::Unfit(reason) => (reason, false),
                        Miss::Reserved(reason) => (reason, true),
                    };
                    failed.push(index);
                }
            }
            let progress = failed.len() < queue.len();
            queue = failed;
            if queue.is_empty() || !progress {
                break;
            }
        }
        let mut unschedulable: Vec<Unschedulable> = queue
            .into_iter()
            .map(|index| Unschedulable {
                pod: pods[index].key.clone(),
                reason: std::mem::take(&mut reasons[index]),
                deferred: deferred[index],
            })
            .collect();
        let mut claims = Vec::with_capacity(solver.claims.len());
        let mut rankings = Rankings::new();
        for (c, claim) in solver.claims.iter().enumerate() {
            match solver.finish(c, claim, pods, &mut rankings) {
                Ok(planned) => claims.push(planned),
                // The truncated launch list broke minValues: the claim's pods wait (Strict policy).
                Err(reason) => unschedulable.extend(
                    claim
                        .pods
                        .iter()
                        .map(|p| Unschedulable::new(pods[*p].key.clone(), reason.clone())),
                ),
            }
        }
        let existing = solver
            .nodes
            .iter()
            .filter(|s| !s.pods.is_empty())
            .map(|s| NodePlacement {
                node: s.node.name.clone(),
                pods: s.pods.iter().map(|p| pods[*p].key.clone()).collect(),
            })
            .collect();
        Plan {
            claims,
            existing,
            unschedulable,
            effective_zones,
        }
    }

    /// The label keys the solve's topology constrains on (those of the pending pods and the required
    /// anti-affinity of the bound ones), with the domains each template and the existing nodes offer there.
    fn solve_domains(
        &self,
        pods: &[PodInfo],
        bound: &[Bound],
        nodes: &[NodeState],
    ) -> SolveDomains {
        let keys: std::collections::BTreeSet<&TopologyKey> = pods
            .iter()
            .chain(bound.iter().map(|b| b.pod))
            .flat_map(|p| p.topology.iter().map(|c| &c.key))
            .filter(|k| **k != TopologyKey::Hostname)
            .collect();
        let keys: Vec<TopologyKey> = keys.into_iter().cloned().collect();
        let per_template = (0..self.prepared.templates.len())
            .map(|t| {
                keys.iter()
                    .map(|key| self.template_domains(t, key))
                    .collect()
            })
            .collect::<Vec<Vec<Vec<String>>>>();
        let over_limits = self
            .prepared
            .templates
            .iter()
            .zip(&per_template)
            .map(|(template, theirs)| {
                keys.iter()
                    .zip(theirs)
                    .map(|(key, usable)| {
                        if template.over_limits.is_empty() {
                            return Vec::new();
                        }
                        self.types_domains(template, &template.over_limits, key)
                            .into_iter()
                            .filter(|d| !usable.contains(d))
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let nodes = keys
            .iter()
            .enumerate()
            .map(|(k, key)| {
                let mut values: std::collections::BTreeSet<&str> = per_template
                    .iter()
                    .flat_map(|d| d[k].iter().map(String::as_str))
                    .collect();
                values.extend(
                    nodes
                        .iter()
                        .filter_map(|s| single_value(&s.node.requirements, key.label())),
                );
                values.into_iter().map(str::to_owned).collect()
            })
            .collect();
        SolveDomains {
            keys,
            per_template,
            over_limits,
            nodes,
        }
    }

    /// An existing node at the start of the solve: its room is what is allocatable minus its pods' requests and
    /// minus the DaemonSets that would run there but do not yet (controller-behaviour.md §1.3).
    fn node_state<'n>(&'n self, node: &'n ExistingNode) -> NodeState<'n> {
        let allow = if node.in_flight {
            &self.prepared.allow
        } else {
            &DEFINED_ONLY
        };
        let missing = self.prepared.daemonsets.iter().filter(|d| {
            !node
                .pods
                .iter()
                .any(|b| b.daemonset.as_deref() == Some(d.name.as_str()))
                && daemons::runs_on(&d.pod, &node.taints, &node.requirements, allow)
        });
        let taken = daemons::overhead(
            node.pods
                .iter()
                .map(|b| &b.pod)
                .chain(missing.map(|d| &d.pod)),
        );
        let mut room = node.allocatable.clone() - &taken.overhead;
        // A node already over-committed has no room left, not negative room.
        room.cpu = room.cpu.max(0);
        room.memory = room.memory.max(0);
        room.pods = room.pods.max(0);
        room.ephemeral_storage = room.ephemeral_storage.max(0);
        NodeState {
            node,
            allow,
            room,
            ports: taken.ports,
            attached: node.attached.clone(),
            pods: Vec::new(),
        }
    }

    /// What each NodePool, in the order they are tried, offers `pod` on a new node with every preference
    /// relaxed: how many types fit and the cheapest, or why the pool cannot take it.
    pub fn options(&self, pod: &PodInfo) -> Vec<PoolOption> {
        let Some(requirements) = pod.variants.last() else {
            return Vec::new();
        };
        let volumes = with_volumes(vec![Vec::new()], pod);
        self.prepared
            .templates
            .iter()
            .enumerate()
            .map(|(t, template)| {
                // The first of the pod's volume alternatives the pool can take.
                let mut fit = Err(String::new());
                for extra in &volumes {
                    fit = self.fresh_claim(
                        t,
                        template.instance_types.clone(),
                        pod,
                        requirements,
                        extra,
                        false,
                    );
                    if fit.is_ok() {
                        break;
                    }
                }
                let fit = fit.map(|claim| {
                    let (instance_types, cheapest) = self.count_and_cheapest(&claim);
                    PoolFit {
                        instance_types,
                        cheapest,
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
        let template = &self.prepared.templates[t];
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
            ports: Vec::new(),
            floor: Floor::default(),
            domains: Vec::new(),
        };
        let (requirements, instance_types) = self.narrow(&empty, pod, requirements, extra)?;
        let instance_types = instance_types.unwrap_or(empty.instance_types);
        let requirements = requirements.unwrap_or(empty.requirements);
        Ok(Claim {
            requirements,
            floor: self.floor(t, &instance_types),
            instance_types,
            requests: pod.requests.clone(),
            ports: pod.host_ports.clone(),
            ..empty
        })
    }

    /// The domains template `t` offers on label `key`: for a zone or capacity type those of the offerings it
    /// allows; for another label the values its requirements list and those its instance types have that its
    /// requirements allow (as Karpenter builds its topology domains).
    fn template_domains(&self, t: usize, key: &TopologyKey) -> Vec<String> {
        match key.label() {
            labels::ZONE => return self.prepared.domains[t][0].clone(),
            labels::CAPACITY_TYPE => return self.prepared.domains[t][1].clone(),
            _ => {}
        }
        let template = &self.prepared.templates[t];
        self.types_domains(template, &template.instance_types, key)
    }

    /// The values `template` with the catalog `types` offers on `key`.
    fn types_domains(
        &self,
        template: &Template,
        types: &[usize],
        key: &TopologyKey,
    ) -> Vec<String> {
        if matches!(key.label(), labels::ZONE | labels::CAPACITY_TYPE) {
            let [zones, capacity_types] = offering_domains(self.catalog, template, types);
            return if key.label() == labels::ZONE {
                zones
            } else {
                capacity_types
            };
        }
        let theirs = template.requirements.get(key.label());
        let mut values: std::collections::BTreeSet<&str> = theirs
            .and_then(|r| r.values())
            .into_iter()
            .flat_map(|v| v.iter().map(String::as_str))
            .collect();
        for i in types {
            let it = &self.catalog.instance_types[*i];
            for v in it
                .requirements
                .get(key.label())
                .and_then(|r| r.values())
                .into_iter()
                .flatten()
            {
                if theirs.is_none_or(|r| r.has(v)) {
                    values.insert(v);
                }
            }
        }
        values.into_iter().map(str::to_owned).collect()
    }

    /// The least room among `types` on template `t`.
    fn floor(&self, t: usize, types: &[usize]) -> Floor {
        Floor::of(types.iter().map(|i| &self.prepared.daemons[t].room[*i]))
    }

    /// The claim's requirements and instance types with the pod and the topology narrowing `extra` added (each
    /// `None` when unchanged), or why the pod does not fit.
    fn narrow(
        &self,
        claim: &Claim,
        pod: &PodInfo,
        requirements: &Requirements,
        extra: &[Requirement],
    ) -> Result<(Option<Requirements>, Option<Vec<usize>>), String> {
        let narrowed = !requirements.is_empty() || !extra.is_empty();
        if !narrowed
            && pod.host_ports.is_empty()
            && claim.floor.holds(&(claim.requests.clone() + &pod.requests))
        {
            return Ok((None, None));
        }
        let merged = if narrowed {
            claim
                .requirements
                .compatible(requirements, &self.prepared.allow)
                .map_err(|why| format!("incompatible requirements, {why}"))?;
            // A volume's topology may name a key nothing defines (a CSI driver's own zone label): no node this
            // pool launches would carry it, as Karpenter's volume-alternative compatibility check says.
            if let Some(r) = extra.iter().find(|r| {
                !r.allows_absent()
                    && claim.requirements.get(r.key()).is_none()
                    && requirements.get(r.key()).is_none()
                    && !self.prepared.allow.allows(r.key())
            }) {
                return Err(format!(
                    "incompatible requirements, label {:?} does not have known values",
                    r.key()
                ));
            }
            let mut merged = claim.requirements.clone();
            merged.add_all(requirements);
            for r in extra {
                merged.add(r.clone());
            }
            Some(merged)
        } else {
            None
        };
        // The claim's types already meet its requirements: only the keys the pod and `extra` add can rule a
        // type out, and only a zone or capacity type can rule out its offerings. An allowed offering implies the
        // type's zone and capacity type meet the requirements, so with offering bits those keys are left to them.
        let mut offers_touched = false;
        let touched: Option<Requirements> = merged.as_ref().map(|merged| {
            requirements
                .iter()
                .map(Requirement::key)
                .chain(extra.iter().map(Requirement::key))
                .filter(|key| {
                    let offering_key = *key == labels::ZONE || *key == labels::CAPACITY_TYPE;
                    offers_touched |= offering_key;
                    !(offering_key && self.prepared.offering_bits.is_some())
                })
                .filter_map(|key| merged.get(key).cloned())
                .collect()
        });
        let offers = match &merged {
            Some(merged) if offers_touched => Some(match &self.prepared.offering_bits {
                Some(bits) => Offers::Bits(bits, bits.allowed(merged)),
                None => Offers::Slow(merged),
            }),
            _ => None,
        };
        let total = claim.requests.clone() + &pod.requests;
        let daemons = &self.prepared.daemons[claim.template];
        let types: Vec<usize> = claim
            .instance_types
            .iter()
            .copied()
            .filter(|i| total.fits_in(&daemons.room[*i]))
            .filter(|i| {
                pod.host_ports.is_empty()
                    || !ports_clash(&pod.host_ports, &daemons.groups[daemons.group[*i]].ports)
            })
            .filter(|i| {
                let it = &self.catalog.instance_types[*i];
                touched
                    .as_ref()
                    .is_none_or(|t| t.is_empty() || t.has_intersection(&it.requirements))
                    && offers.as_ref().is_none_or(|o| match o {
                        Offers::Bits(bits, allowed) => bits.offers(*i) & allowed != 0,
                        Offers::Slow(merged) => cheapest_offering(it, merged).is_some(),
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
        if self.prepared.templates[claim.template].min_values
            && self.min_values == MinValuesPolicy::Strict
        {
            let requirements = merged.as_ref().unwrap_or(&claim.requirements);
            min_values::shortest_prefix(self.catalog, requirements, &types)
                .map_err(|unmet| unmet.to_string())?;
        }
        Ok((merged, Some(types)))
    }

    /// The claim's instance types with their cheapest allowed price, cheapest first.
    fn ranked(&self, claim: &Claim) -> Vec<(usize, f64)> {
        self.rank(&claim.instance_types, &claim.requirements)
    }

    /// `types` with their cheapest price `requirements` allow, cheapest first; types with no allowed offering
    /// left out.
    fn rank(&self, types: &[usize], requirements: &Requirements) -> Vec<(usize, f64)> {
        let mut ranked: Vec<(usize, f64)> = types
            .iter()
            .filter_map(|i| {
                let it = &self.catalog.instance_types[*i];
                cheapest_offering(it, requirements).map(|o| (*i, o.price.unwrap_or(f64::INFINITY)))
            })
            .collect();
        ranked
            .sort_by(|(a, pa), (b, pb)| pa.total_cmp(pb).then_with(|| self.smaller_first(*a, *b)));
        ranked
    }

    /// How many of the claim's types have an allowed offering, and the first of them in [`Self::rank`]'s order,
    /// in one pass without sorting: all pod advice needs, on the admission path.
    fn count_and_cheapest(&self, claim: &Claim) -> (usize, Option<Choice>) {
        let mut count = 0;
        let mut best: Option<(usize, f64)> = None;
        for &i in &claim.instance_types {
            let it = &self.catalog.instance_types[i];
            let Some(offering) = cheapest_offering(it, &claim.requirements) else {
                continue;
            };
            count += 1;
            let price = offering.price.unwrap_or(f64::INFINITY);
            let better = best.is_none_or(|(b, pb)| {
                price
                    .total_cmp(&pb)
                    .then_with(|| self.smaller_first(i, b))
                    .is_lt()
            });
            if better {
                best = Some((i, price));
            }
        }
        (
            count,
            best.and_then(|b| self.choice(&claim.requirements, &[b])),
        )
    }

    /// Among equal prices (unknown ones included), the smaller type first, then the catalog order.
    fn smaller_first(&self, a: usize, b: usize) -> std::cmp::Ordering {
        let size = |i: usize| {
            let capacity = &self.catalog.instance_types[i].capacity;
            (capacity.cpu, capacity.memory)
        };
        size(a).cmp(&size(b)).then(a.cmp(&b))
    }

    fn choice(&self, requirements: &Requirements, ranked: &[(usize, f64)]) -> Option<Choice> {
        let it = &self.catalog.instance_types[ranked.first()?.0];
        Choice::cheapest(it, requirements)
    }
}

/// The label keys a solve's topology constrains on, and the domains each template and the existing nodes offer
/// on each.
struct SolveDomains {
    keys: Vec<TopologyKey>,
    /// Per template, per key: the domains it offers.
    per_template: Vec<Vec<Vec<String>>>,
    /// Per template and key: the further domains of the types only its limits rule out (spread counts them).
    over_limits: Vec<Vec<Vec<String>>>,
    /// Per key: the domains of every template and existing node, which a pod on an existing node may take.
    nodes: Vec<Vec<String>>,
}

impl SolveDomains {
    /// The index of label `key` among the keys.
    fn index(&self, key: &TopologyKey) -> Option<usize> {
        self.keys.iter().position(|k| k == key)
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
    /// Existing nodes in the order they are tried; node `n` is host `n` in the topology, claim `c` host
    /// `nodes.len() + c`.
    nodes: Vec<NodeState<'s>>,
    domains: &'s SolveDomains,
    /// The catalog's capacity reservations, with what the claims of this solve hold.
    reservations: Reservations,
}

/// Why one attempt at placing a pod failed.
enum Miss {
    /// Not with these requirements: the next relaxation step may do.
    Unfit(String),
    /// Reserved capacity the pod could use is all held by this solve's claims ([`ReservedMode::Strict`]): the pod
    /// waits for the next solve, without relaxing or trying NodePools of lower weight, as in Karpenter.
    Reserved(String),
}

impl From<String> for Miss {
    fn from(reason: String) -> Self {
        Miss::Unfit(reason)
    }
}

/// A node's labels are final: a pod may require only the labels it has.
static DEFINED_ONLY: AllowUndefined = AllowUndefined::NONE;

/// An existing node during a solve.
struct NodeState<'n> {
    node: &'n ExistingNode,
    /// Which labels the node may still get (an in-flight claim's well-known labels).
    allow: &'n AllowUndefined,
    /// What is left for pods: allocatable minus bound pods, missing DaemonSets and pods placed by this solve.
    room: Resources,
    /// Host ports taken by its pods and DaemonSets.
    ports: Vec<HostPort>,
    /// The volumes attached against its CSI limits, with those of the pods this solve placed.
    attached: std::collections::BTreeSet<AttachedVolume>,
    /// Pods this solve placed on it.
    pods: Vec<usize>,
}

impl NodeState<'_> {
    /// Whether `pod`'s volumes would take some CSI driver past this node's limit (Karpenter's
    /// `ExceedsLimits`): volumes already attached count once.
    fn exceeds_volume_limits(&self, pod: &PodInfo) -> bool {
        let limits = &self.node.volume_limits;
        if limits.is_empty() || pod.attached.is_empty() {
            return false;
        }
        limits.iter().any(|(driver, limit)| {
            let new = pod
                .attached
                .iter()
                .filter(|v| &v.driver == driver && !self.attached.contains(*v))
                .count();
            let attached = self.attached.iter().filter(|v| &v.driver == driver).count();
            new > 0 && attached + new > *limit as usize
        })
    }
}

impl<'n> NodeState<'n> {
    /// The node as topology sees it.
    fn host(&self) -> Host<'n> {
        Host {
            requirements: &self.node.requirements,
            taints: &self.node.taints,
            allow: self.allow,
        }
    }
}

/// Plans NodeClaims for `pods` over `nodepools` and the `catalog`, in an empty cluster.
pub fn solve(pods: &[PodInfo], nodepools: &[NodePool], catalog: &Catalog) -> Plan {
    solve_cluster(pods, nodepools, catalog, &Cluster::default())
}

/// Plans where `pods` go in `cluster`: its existing nodes first, then new NodeClaims over `nodepools`.
pub fn solve_cluster(
    pods: &[PodInfo],
    nodepools: &[NodePool],
    catalog: &Catalog,
    cluster: &Cluster,
) -> Plan {
    Scheduler::with_daemonsets(nodepools, catalog, &cluster.daemonsets)
        .solve_on(pods, &cluster.nodes)
}

impl<'s> Solver<'s, '_> {
    /// Tries pod `index` with the relaxation order of controller-behaviour.md §1.4: required terms in turn,
    /// then preferred pod affinity, pod anti-affinity, node affinity and `ScheduleAnyway` spread dropped one at
    /// a time, then `PreferNoSchedule` taints tolerated.
    fn place(&mut self, index: usize) -> Result<(), Miss> {
        let pod = &self.pods[index];
        if pod.variants.is_empty() {
            return Err(Miss::Unfit(String::from("the pod has no requirement set")));
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
        if self.scheduler.prepared.soft_taints {
            attempts.push((last, relaxed, false));
        }
        let mut reason = String::new();
        for (variant, relaxed, soft) in attempts {
            match self.place_with(index, variant, relaxed, soft) {
                Ok(()) => return Ok(()),
                Err(Miss::Unfit(why)) => reason = why,
                Err(reserved @ Miss::Reserved(_)) => return Err(reserved),
            }
        }
        Err(Miss::Unfit(reason))
    }

    /// What pod `p`'s label-key constraints allow on template `t` with requirement set `variant`, or the
    /// constraint that cannot be met. The same for every claim of the template; each claim then keeps the
    /// domains it still allows.
    fn narrowings(
        &self,
        p: usize,
        t: usize,
        variant: usize,
        relaxed: Relaxed,
    ) -> Result<Vec<Narrowing<'s>>, String> {
        let domains: &'s SolveDomains = self.domains;
        self.narrowings_over(p, &domains.per_template[t], variant, relaxed)
    }

    /// The domains of template `t` that `narrowings` allow, as [`domain_bits`] per key (all for a key they
    /// leave alone).
    fn narrowing_bits(&self, t: usize, narrowings: &[Narrowing]) -> Vec<u64> {
        let domains = self.domains;
        domains
            .keys
            .iter()
            .enumerate()
            .map(|(k, key)| match narrowings.iter().find(|n| n.key == *key) {
                Some(n) => domain_bits(&domains.per_template[t][k], |d| n.allowed.contains(&d)),
                None => u64::MAX,
            })
            .collect()
    }

    /// The domains of template `t` that `requirements` allow, as [`domain_bits`] per key.
    fn domain_bits(&self, t: usize, requirements: &Requirements) -> Vec<u64> {
        let domains = self.domains;
        domains
            .keys
            .iter()
            .enumerate()
            .map(|(k, key)| {
                let theirs = requirements.get(key.label());
                domain_bits(&domains.per_template[t][k], |d| {
                    theirs.is_none_or(|r| r.has(d))
                })
            })
            .collect()
    }

    /// The zone pod `p`'s constraints hold it to as the solve starts (Karpenter computes it before scheduling):
    /// its strict zone requirement, its volumes, and the zones its topology constraints on the zone key allow
    /// over every zone the solve knows (Karpenter's `GetTopologyZoneConstraints`).
    fn effective_zone(&self, p: usize) -> String {
        let pod = &self.pods[p];
        let zone = TopologyKey::of(labels::ZONE);
        let strict = pod.strict_of(0).and_then(|r| r.get(labels::ZONE));
        let topology = match self.domains.index(&zone) {
            Some(k) if self.topology.touches(p, &zone) => {
                let theirs = pod.variants.first().and_then(|r| r.get(labels::ZONE));
                let domains = Domains {
                    key: &zone,
                    eligible: self.domains.nodes[k]
                        .iter()
                        .map(String::as_str)
                        .filter(|d| theirs.is_none_or(|r| r.has(d)))
                        .collect(),
                    strict,
                };
                match self
                    .topology
                    .narrowing(self.pods, p, Relaxed::default(), &domains)
                {
                    Err(_) => Some(Vec::new()),
                    Ok(None) => None,
                    Ok(Some(n)) => Some(n.allowed),
                }
            }
            _ => None,
        };
        effective_zone(strict, &pod.volume_alternatives, topology.as_deref())
    }

    /// [`Self::narrowings`] over `domains` (per key of the solve).
    fn narrowings_over<'d>(
        &self,
        p: usize,
        domains: &'d [Vec<String>],
        variant: usize,
        relaxed: Relaxed,
    ) -> Result<Vec<Narrowing<'d>>, String> {
        let pod = &self.pods[p];
        let requirements = &pod.variants[variant];
        let strict = pod.strict_of(variant);
        let mut out = Vec::new();
        for (key, offered) in self.domains.keys.iter().zip(domains) {
            if !self.topology.touches(p, key) {
                continue;
            }
            let theirs = requirements.get(key.label());
            let domains = Domains {
                key,
                eligible: offered
                    .iter()
                    .map(String::as_str)
                    .filter(|d| theirs.is_none_or(|r| r.has(d)))
                    .collect(),
                strict: strict.and_then(|r| r.get(key.label())),
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
    ) -> Result<(), Miss> {
        let pod = &self.pods[index];
        let requirements = &pod.variants[variant];
        if let Some(n) = self.existing_fit(index, variant, relaxed, soft) {
            let pods = self.pods;
            let state = &mut self.nodes[n];
            state.room -= &pod.requests;
            state.ports.extend(pod.host_ports.iter().cloned());
            if !state.node.volume_limits.is_empty() {
                state.attached.extend(pod.attached.iter().cloned());
            }
            state.pods.push(index);
            let host = state.host();
            self.topology.record(pods, index, n, &host, |key| {
                single_value(host.requirements, key.label())
                    .into_iter()
                    .collect()
            });
            return Ok(());
        }
        let hosts = self.nodes.len();
        let well_known = &self.scheduler.prepared.allow;
        // Per template, computed on first use.
        let mut narrowings: Vec<Option<TemplateNarrowings<'s>>> = vec![None; self.templates.len()];
        // Claims planned earlier, fewest pods first (then oldest). A hostname-spread or anti-affinity pod that
        // every claim turns away skips the walk.
        let mut placed = None;
        let walk =
            if self
                .topology
                .excludes_every_claim(self.pods, index, relaxed, self.claims.len())
            {
                &[][..]
            } else {
                &self.order[..]
            };
        for &c in walk {
            let claim = &self.claims[c];
            let template = &self.templates[claim.template];
            let Ok((narrowing, allowed)) = narrowings[claim.template]
                .get_or_insert_with(|| {
                    self.narrowings(index, claim.template, variant, relaxed)
                        .map(|n| {
                            let bits = self.narrowing_bits(claim.template, &n);
                            (n, bits)
                        })
                })
                .as_ref()
            else {
                continue;
            };
            // Most claims a zonal-spread pod walks past are in a zone it may not take: one AND rules them out,
            // before the costlier checks.
            if claim
                .domains
                .iter()
                .zip(allowed)
                .any(|(claim, allowed)| claim & allowed == 0)
            {
                continue;
            }
            if untolerated(&pod.tolerations, &template.taints, soft).is_some()
                || ports_clash(&pod.host_ports, &claim.ports)
                || !self.topology.host_ok(self.pods, index, relaxed, hosts + c)
                || !claim.requirements.is_compatible(requirements, well_known)
            {
                continue;
            }
            // Exact where the bits are not (more than 64 domains): rule the claim out before allocating.
            if !narrowing
                .iter()
                .all(|n| n.admits_any(claim.requirements.get(n.key.label())))
            {
                continue;
            }
            let alternatives = if narrowing.is_empty() {
                vec![Vec::new()]
            } else {
                combine(narrowing, &claim.requirements)
            };
            for extra in with_volumes(alternatives, pod) {
                let Ok(fit) = self.scheduler.narrow(claim, pod, requirements, &extra) else {
                    continue;
                };
                // A claim that would break its reservations (or find them all taken) is passed by.
                // The pod leaves the claim's requirements and types as they are where `fit` has none.
                let held = self.reservable(
                    Some(c),
                    fit.0.as_ref().unwrap_or(&claim.requirements),
                    fit.1.as_deref().unwrap_or(&claim.instance_types),
                );
                let Ok(held) = held else {
                    continue;
                };
                placed = Some((c, fit, held));
                break;
            }
            if placed.is_some() {
                break;
            }
        }
        if let Some((c, (merged, types), held)) = placed {
            if let Some(held) = held {
                self.reservations.hold(c, held);
            }
            let bits = merged
                .as_ref()
                .map(|merged| self.domain_bits(self.claims[c].template, merged));
            let claim = &mut self.claims[c];
            if let (Some(merged), Some(bits)) = (merged, bits) {
                claim.domains = bits;
                claim.requirements = merged;
            }
            if let Some(types) = types {
                claim.floor = self.scheduler.floor(claim.template, &types);
                claim.instance_types = types;
            }
            claim.requests += &pod.requests;
            claim.ports.extend(pod.host_ports.iter().cloned());
            claim.pods.push(index);
            self.reorder(c);
            self.record(index, c);
            return Ok(());
        }
        let mut reasons = Vec::new();
        for t in 0..self.templates.len() {
            let outcome = self.open_claim(t, index, variant, relaxed, soft);
            let pool = &self.templates[t].nodepool;
            match outcome {
                Ok(()) => return Ok(()),
                Err(Miss::Unfit(why)) => reasons.push(format!("nodepool {pool}: {why}")),
                // No fallback to a NodePool of lower weight while this one has reserved capacity for the pod.
                Err(Miss::Reserved(why)) => {
                    return Err(Miss::Reserved(format!("nodepool {pool}: {why}")))
                }
            }
        }
        if reasons.is_empty() {
            return Err(Miss::Unfit("no nodepool can launch nodes".to_owned()));
        }
        Err(Miss::Unfit(reasons.join("; ")))
    }

    /// The reservations claim `claim` (`None` for a new one) would hold with `requirements` and `types` after
    /// taking a pod; `None` when the catalog has no reservation.
    fn reservable(
        &self,
        claim: Option<usize>,
        requirements: &Requirements,
        types: &[usize],
    ) -> Result<Option<std::collections::BTreeSet<String>>, &'static str> {
        if self.reservations.is_empty() {
            return Ok(None);
        }
        self.reservations
            .reservable(
                self.scheduler.reserved,
                claim,
                self.scheduler.catalog,
                types,
                requirements,
            )
            .map(Some)
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

    /// The first existing node that takes pod `index` with `requirements`, checked as Karpenter does: taints,
    /// host ports, resources, labels, then topology.
    fn existing_fit(
        &self,
        index: usize,
        variant: usize,
        relaxed: Relaxed,
        soft: bool,
    ) -> Option<usize> {
        let pod = &self.pods[index];
        let requirements = &pod.variants[variant];
        // The label-key narrowings, computed on first use: the same for every node.
        let mut narrowings: Option<Result<Vec<Narrowing>, String>> = None;
        (0..self.nodes.len()).find(|&host| {
            let state = &self.nodes[host];
            let node = state.node;
            if untolerated(&pod.tolerations, &node.taints, soft).is_some()
                || state.exceeds_volume_limits(pod)
                || ports_clash(&pod.host_ports, &state.ports)
                || !pod.requests.fits_in(&state.room)
                || !node.requirements.is_compatible(requirements, state.allow)
                || !pod.volume_alternatives.is_empty()
                    && !pod.volume_alternatives.iter().any(|alternative| {
                        node.requirements.is_compatible(alternative, state.allow)
                    })
            {
                return false;
            }
            if !self.topology.host_ok(self.pods, index, relaxed, host) {
                return false;
            }
            let Ok(narrowings) = narrowings
                .get_or_insert_with(|| {
                    self.narrowings_over(index, &self.domains.nodes, variant, relaxed)
                })
                .as_ref()
            else {
                return false;
            };
            narrowings.iter().all(|n| {
                single_value(&node.requirements, n.key.label())
                    .is_some_and(|v| n.allowed.contains(&v))
            })
        })
    }

    /// Counts pod `p`, just placed on claim `c`, in the topology groups.
    fn record(&mut self, p: usize, c: usize) {
        let claim = &self.claims[c];
        let domains = self.domains;
        let per_key = &domains.per_template[claim.template];
        let requirements = &claim.requirements;
        let host = Host {
            requirements,
            taints: &self.templates[claim.template].taints,
            allow: &self.scheduler.prepared.allow,
        };
        let values = |key: &TopologyKey| {
            domains
                .index(key)
                .map(|k| {
                    per_key[k]
                        .iter()
                        .map(String::as_str)
                        .filter(|d| requirements.get(key.label()).is_none_or(|r| r.has(d)))
                        .collect()
                })
                .unwrap_or_default()
        };
        self.topology
            .record(self.pods, p, self.nodes.len() + c, &host, values);
    }

    /// A new claim from template `t` holding the pod, if the pool (and what is left of its limits) can take it.
    fn open_claim(
        &mut self,
        t: usize,
        index: usize,
        variant: usize,
        relaxed: Relaxed,
        soft: bool,
    ) -> Result<(), Miss> {
        let scheduler = self.scheduler;
        let pod = &self.pods[index];
        let requirements = &pod.variants[variant];
        let template = &self.templates[t];
        if template.unusable.is_none() {
            self.topology.host_allows(
                self.pods,
                index,
                relaxed,
                self.nodes.len() + self.claims.len(),
            )?;
        }
        let instance_types = match &template.remaining {
            Some(left) if template.unusable.is_none() => {
                if let Some(limit) = left.exhausted() {
                    return Err(Miss::Unfit(format!(
                        "{limit} limit has been exhausted for nodepool {}",
                        template.nodepool
                    )));
                }
                let admitted: Vec<usize> = template
                    .instance_types
                    .iter()
                    .copied()
                    .filter(|i| left.admits(&scheduler.catalog.instance_types[*i].capacity))
                    .collect();
                if admitted.is_empty() {
                    return Err(Miss::Unfit(format!(
                        "all available instance types exceed limits for nodepool {}",
                        template.nodepool
                    )));
                }
                admitted
            }
            _ => template.instance_types.clone(),
        };
        let alternatives = if template.unusable.is_none() {
            let narrowing = self.narrowings(index, t, variant, relaxed)?;
            with_volumes(combine(&narrowing, &template.requirements), pod)
        } else {
            vec![Vec::new()]
        };
        let mut result = Err(Miss::Unfit(String::new()));
        let mut held = None;
        for extra in &alternatives {
            result = scheduler
                .fresh_claim(t, instance_types.clone(), pod, requirements, extra, soft)
                .map_err(Miss::Unfit);
            if let Ok(claim) = &result {
                match self.reservable(None, &claim.requirements, &claim.instance_types) {
                    Ok(ids) => {
                        held = ids;
                        break;
                    }
                    Err(why) => result = Err(Miss::Reserved(why.to_owned())),
                }
            }
        }
        let mut claim = result?;
        claim.domains = self.domain_bits(t, &claim.requirements);
        claim.pods.push(index);
        // A new claim uses up the largest capacity it might launch with: pessimistic, as Karpenter is.
        if let Some(left) = self.templates[t].remaining.as_mut() {
            left.consume(&largest_capacity(scheduler.catalog, &claim.instance_types));
        }
        self.claims.push(claim);
        let c = self.claims.len() - 1;
        if let Some(held) = held {
            self.reservations.hold(c, held);
        }
        self.reorder(c);
        self.record(index, c);
        Ok(())
    }
    /// Claim `c` as planned: its launch list cut to [`MAX_INSTANCE_TYPES`] cheapest types, and the smallest
    /// DaemonSet overhead of those added to its requests; narrowed to its capacity reservations if it holds any.
    /// Under the Strict minValues policy, a cut that breaks minValues is an error for the claim's pods.
    fn finish(
        &self,
        c: usize,
        claim: &Claim,
        pods: &[PodInfo],
        rankings: &mut Rankings,
    ) -> Result<PlannedClaim, String> {
        let scheduler = self.scheduler;
        let template = &self.templates[claim.template];
        let reserved = self.reservations.finish(c, &claim.requirements);
        let requirements = reserved.as_ref().unwrap_or(&claim.requirements);
        let mut ranked = match &scheduler.prepared.offering_bits {
            // A claim launching into its reservations ranks its own types: the shared rankings do not tell
            // reservations apart.
            _ if reserved.is_some() => scheduler.rank(&claim.instance_types, requirements),
            // Claims of one template that allow the same offerings rank their types alike: rank the template's
            // types once and keep the claim's.
            Some(bits) => {
                let all = rankings
                    .entry((claim.template, bits.allowed(&claim.requirements)))
                    .or_insert_with(|| {
                        scheduler.rank(&template.instance_types, &claim.requirements)
                    });
                let mut member = vec![false; scheduler.catalog.instance_types.len()];
                for i in &claim.instance_types {
                    member[*i] = true;
                }
                all.iter().filter(|(i, _)| member[*i]).copied().collect()
            }
            None => scheduler.ranked(claim),
        };
        if template.min_values && scheduler.min_values == MinValuesPolicy::Strict {
            let types: Vec<usize> = ranked.iter().map(|(i, _)| *i).collect();
            let needed = min_values::shortest_prefix(scheduler.catalog, requirements, &types)
                .map_err(|unmet| format!("nodepool {}: {unmet}", template.nodepool))?;
            if needed > MAX_INSTANCE_TYPES {
                return Err(format!(
                    "nodepool {}: minValues needs the {needed} cheapest instance types, more than the {MAX_INSTANCE_TYPES} a NodeClaim may list",
                    template.nodepool
                ));
            }
        }
        ranked.truncate(MAX_INSTANCE_TYPES);
        let mut requests = claim.requests.clone();
        if let Some(daemons) =
            scheduler.prepared.daemons[claim.template].smallest(ranked.iter().map(|(i, _)| *i))
        {
            requests += &daemons.overhead;
        }
        Ok(PlannedClaim {
            nodepool: template.nodepool.clone(),
            requirements: requirements.clone(),
            instance_types: ranked
                .iter()
                .map(|(i, _)| scheduler.prepared.names[*i].clone())
                .collect(),
            pods: claim.pods.iter().map(|p| pods[*p].key.clone()).collect(),
            requests,
            cheapest: scheduler.choice(requirements, &ranked),
        })
    }
}

/// Per template and allowed offerings (as bits): the template's types ranked, cheapest first.
type Rankings = std::collections::HashMap<(usize, u64), Vec<(usize, f64)>>;

/// Which of `domains` (a template's zones or capacity types) `allows` takes, bit i for the i-th; every bit set
/// when there are more than 64, so that a test against the bits never rules anything out.
fn domain_bits(domains: &[String], allows: impl Fn(&str) -> bool) -> u64 {
    if domains.len() > 64 {
        return u64::MAX;
    }
    domains
        .iter()
        .enumerate()
        .filter(|(_, d)| allows(d))
        .fold(0, |bits, (i, _)| bits | 1 << i)
}

/// A pod's label-key narrowings on one template with the domains they allow as
/// [`domain_bits`], or the constraint that cannot be met.
type TemplateNarrowings<'s> = Result<(Vec<Narrowing<'s>>, Vec<u64>), String>;

/// How `narrow` checks that a type still has an allowed offering.
enum Offers<'a> {
    /// Through the catalog's offering bits: the allowed ones.
    Bits(&'a OfferingBits, u64),
    /// Offering by offering, against the merged requirements.
    Slow(&'a Requirements),
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

/// The requirement lists to try on a claim: each of `alternatives` (the topology's) with each of the pod's
/// volume alternatives, the volume's outermost (Karpenter tries a pod's volume alternatives in turn on each
/// claim, its topology within each).
fn with_volumes(alternatives: Vec<Vec<Requirement>>, pod: &PodInfo) -> Vec<Vec<Requirement>> {
    if pod.volume_alternatives.is_empty() {
        return alternatives;
    }
    pod.volume_alternatives
        .iter()
        .flat_map(|volume| {
            alternatives.iter().map(move |topology| {
                let mut extra = topology.clone();
                extra.extend(volume.iter().cloned());
                extra
            })
        })
        .collect()
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

/// The zones and the capacity types of the offerings of `types` that `template`'s requirements allow: its
/// topology domains on those two keys.
fn offering_domains(catalog: &Catalog, template: &Template, types: &[usize]) -> [Vec<String>; 2] {
    let mut zones = std::collections::BTreeSet::new();
    let mut capacity_types = std::collections::BTreeSet::new();
    for o in types
        .iter()
        .flat_map(|i| &catalog.instance_types[*i].offerings)
    {
        if allows(&template.requirements, o) {
            zones.insert(o.zone.as_str());
            capacity_types.insert(o.capacity_type.as_str());
        }
    }
    [
        zones.into_iter().map(str::to_owned).collect(),
        capacity_types.into_iter().map(str::to_owned).collect(),
    ]
}
