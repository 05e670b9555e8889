//! The provisioning simulation (controller-behaviour.md §1.3): pending pods, largest first, onto existing nodes
//! (initialized first, then by name), else onto claims planned earlier in this solve (fewest pods first), else
//! onto a new claim from the NodePools in weight order. Pure and deterministic: the same input gives the same
//! plan.

mod claims;
mod fits;
mod narrowing;
mod place;
mod prepared;
mod refill;
mod run;

pub use fits::NewNode;
use narrowing::{combine, offering_domains, with_volumes};
pub use prepared::PoolKey;

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
use std::sync::Arc;

/// Karpenter writes at most this many instance types into a NodeClaim.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// A NodeClaim the solve decided to create.
#[derive(Clone, Debug, PartialEq)]
pub struct PlannedClaim {
    pub nodepool: String,
    /// The pool's requirements narrowed by the pods.
    pub requirements: Requirements,
    /// The types that fit every pod, cheapest first, at most [`MAX_INSTANCE_TYPES`]. Claims with the same list
    /// share it: thousands of one-pod claims (hostname anti-affinity) would otherwise hold 600 names each.
    pub instance_types: Arc<[TypeName]>,
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
    /// Catalog indices of the types still possible, in the template's price order. Shared with the template, or
    /// with the claim's earlier self, until a pod rules a type out: thousands of claims hold a list.
    instance_types: Arc<[usize]>,
    /// The types the claim could launch as when it was opened, before any pod narrowed them (its pool's types
    /// within its limits): what the claim may widen back to when it gives pods up.
    admitted: Arc<[usize]>,
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
    /// The rankings every solve of this scheduler made so far: they depend only on the catalog and the templates,
    /// which a scheduler never changes, and consolidation solves hundreds of times a pass with the same claims.
    rankings: std::sync::Mutex<Rankings>,
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
            rankings: Default::default(),
        }
    }

    /// A scheduler over `catalog` with the NodePools and DaemonSets `prepared` against that same catalog.
    pub fn prepared(catalog: &'a Catalog, prepared: &'a Prepared) -> Self {
        Scheduler {
            catalog,
            prepared: Cow::Borrowed(prepared),
            min_values: MinValuesPolicy::default(),
            reserved: ReservedMode::default(),
            rankings: Default::default(),
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
    /// Each distinct list of instance types the claims hold: claims narrowed alike (the one-pod claims of a
    /// workload) share one list instead of a copy each.
    lists: TypeLists,
}

/// The distinct lists of instance types (catalog indices) the claims of a solve hold.
#[derive(Default)]
struct TypeLists {
    lists: std::collections::HashSet<Arc<[usize]>>,
    /// How many lists were left after the last sweep of those no claim holds any more.
    kept: usize,
}

impl TypeLists {
    /// The list equal to `types`: one already held, or `types`, which is kept from now on.
    fn share(&mut self, types: Arc<[usize]>) -> Arc<[usize]> {
        if let Some(list) = self.lists.get(&types) {
            return list.clone();
        }
        // A claim narrowed again drops its old list: sweep those when the set has doubled, so that the set
        // holds about what the claims hold.
        if self.lists.len() >= 2 * self.kept.max(64) {
            self.lists.retain(|list| Arc::strong_count(list) > 1);
            self.kept = self.lists.len();
        }
        self.lists.insert(types.clone());
        types
    }
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

/// What finishing the claims of a scheduler's solves shares between them.
#[derive(Default)]
struct Rankings {
    /// Per template and allowed offerings (as bits): the template's types ranked, cheapest first.
    ranked: std::collections::HashMap<(usize, u64), Vec<(usize, f64)>>,
    /// Each distinct launch list (catalog indices) made so far, as the names planned claims share.
    lists: std::collections::HashMap<Vec<usize>, Arc<[TypeName]>>,
}

/// What a pod changes on a claim it fits: the claim's requirements and its instance types, each `None` when
/// unchanged.
type Narrowed = (Option<Requirements>, Option<Vec<usize>>);

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
