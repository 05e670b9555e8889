//! One provisioning decision, pure: the cluster snapshot, the pods to solve for (pending ones, and those of
//! nodes being deleted: [`ToSolve`]) and the catalog of each EC2NodeClass in; the NodeClaims to create, the
//! pods nominated onto capacity that exists or is coming, the pods that fit nowhere, and the warnings for
//! NodePools out. Nodes and claims being deleted are not capacity ([`deleting`](super::deleting)). NodePools
//! are solved in groups by EC2NodeClass (each class has its own catalog), the groups in the order of their
//! heaviest pool; pods one group cannot place go on to the next. With one class — the usual case — that is
//! exactly one solve.

use super::claim;
use super::leaving::Leaving;
use super::pending;
pub use super::preparations::Preparations;
pub use super::replicas::{Replicas, Solvable};
use crate::api::ec2nodeclass::EC2NodeClass;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::engine::usage;
use crate::scheduling::volumes::{self, VolumeIndex};
use crate::scheduling::{
    Choice, Cluster, ClusterError, DefaultSpread, PlannedClaim, PodInfo, Policies, Scheduler,
    Unschedulable,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// What the solve reads, taken from the watch caches (nodes and claims before pods, controller-behaviour.md §1.2).
#[derive(Default)]
pub struct Snapshot {
    /// Shared with the watch cache (or the simulator's run), as the pods are.
    pub nodes: Vec<Arc<Node>>,
    /// Shared too: a claim lists up to 600 instance types.
    pub node_claims: Vec<Arc<NodeClaim>>,
    pub daemon_sets: Vec<DaemonSet>,
    /// Shared with the watch cache, not copied: there may be thousands.
    pub pods: Vec<Arc<Pod>>,
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<EC2NodeClass>,
    /// How preferences and `minValues` are treated (the operator's flags).
    pub policies: Policies,
    /// The cluster's default spread (`--scheduler-config`) with the Services and controllers that deduce each
    /// pod's selector; [`DefaultSpread::default`] when none is configured.
    pub default_spread: DefaultSpread,
    /// The PersistentVolumeClaims, PersistentVolumes and StorageClasses: where pods' volumes let them go.
    pub volumes: VolumeIndex,
    /// The PodDisruptionBudgets: a leaving node's pod they block for good is not solved for.
    pub disruption_budgets: Vec<PodDisruptionBudget>,
}

impl Snapshot {
    /// The Nodes and claims of the snapshot that are being deleted.
    pub fn leaving(&self) -> Leaving {
        Leaving::of(
            self.nodes.iter().map(AsRef::as_ref),
            self.node_claims.iter().map(AsRef::as_ref),
        )
    }
}

/// The pods one batch solves for.
#[derive(Debug, Default)]
pub struct ToSolve<'p> {
    /// Pods the kube-scheduler could not place ([`pending::is_provisionable`]).
    pub pending: Vec<&'p Pod>,
    /// Pods still running on a node being deleted ([`Leaving::is_reschedulable`]).
    pub reschedulable: Vec<&'p Pod>,
}

impl<'p> ToSolve<'p> {
    /// Picks them from `pods`, given what is `leaving`, at `now`.
    pub fn of(
        pods: impl IntoIterator<Item = &'p Pod>,
        leaving: &Leaving,
        pdbs: &[PodDisruptionBudget],
        now: Timestamp,
    ) -> Self {
        let mut to_solve = ToSolve::default();
        for pod in pods {
            if pending::is_provisionable(pod) {
                to_solve.pending.push(pod);
            } else if leaving.is_reschedulable(pod, pdbs, now) {
                to_solve.reschedulable.push(pod);
            }
        }
        to_solve
    }

    /// Every pod to solve for, the pending ones first.
    pub fn all(&self) -> impl Iterator<Item = &'p Pod> + '_ {
        self.pending.iter().chain(&self.reschedulable).copied()
    }
}

/// A NodeClaim to create and the pods it is for.
#[derive(Debug)]
pub struct NewClaim {
    pub nodepool: String,
    /// `namespace/name` of each pod.
    pub pods: Vec<String>,
    /// The cheapest offering the claim allows: what a launch most likely gets.
    pub choice: Option<Choice>,
    object: ClaimObject,
}

/// The NodeClaim object of a [`NewClaim`], or what makes it. A solve's claims list up to 600 instance types each;
/// written out for thousands of claims at once they would be most of a large solve's memory, so a planned claim
/// writes its object when a driver asks for it (the controller when it creates it, the simulator when it
/// launches it).
#[derive(Debug)]
enum ClaimObject {
    Made(Box<NodeClaim>),
    Planned(Box<PlannedObject>),
}

#[derive(Debug)]
struct PlannedObject {
    name: String,
    pool: Arc<NodePool>,
    /// Its `pods` moved to [`NewClaim::pods`]: the object is made from the pods' UIDs below, not their names.
    planned: PlannedClaim,
    pod_uids: Vec<String>,
    /// NodeOverlay annotations (`kerf.sh/…`) of the claim's types.
    annotations: Vec<(String, String)>,
}

impl NewClaim {
    /// A claim whose object is already written (static capacity, disruption replacements).
    pub fn made(
        node_claim: NodeClaim,
        nodepool: String,
        pods: Vec<String>,
        choice: Option<Choice>,
    ) -> Self {
        NewClaim {
            nodepool,
            pods,
            choice,
            object: ClaimObject::Made(Box::new(node_claim)),
        }
    }

    /// The NodeClaim's name.
    pub fn name(&self) -> &str {
        match &self.object {
            ClaimObject::Made(claim) => claim.metadata.name.as_deref().unwrap_or_default(),
            ClaimObject::Planned(p) => &p.name,
        }
    }

    /// The NodeClaim object to create.
    pub fn node_claim(&self) -> NodeClaim {
        match &self.object {
            ClaimObject::Made(claim) => NodeClaim::clone(claim),
            ClaimObject::Planned(p) => {
                let uids: Vec<&str> = p.pod_uids.iter().map(String::as_str).collect();
                let mut node_claim = claim::node_claim(&p.pool, &p.planned, &uids);
                if !p.annotations.is_empty() {
                    let annotations = node_claim.metadata.annotations.get_or_insert_default();
                    annotations.extend(p.annotations.iter().cloned());
                }
                node_claim
            }
        }
    }

    /// The NodeClaim's labels, without writing the object.
    pub fn labels(&self) -> BTreeMap<String, String> {
        match &self.object {
            ClaimObject::Made(claim) => claim.metadata.labels.clone().unwrap_or_default(),
            ClaimObject::Planned(p) => claim::labels(&p.pool, &p.planned),
        }
    }
}

/// A warning about a NodePool (a Kubernetes Event on it).
#[derive(Debug, PartialEq, Eq)]
pub struct PoolWarning {
    pub nodepool: String,
    pub reason: &'static str,
    pub message: String,
}

/// Reason of the Event on a NodePool whose limits stopped provisioning.
pub const LIMIT_REASON: &str = "NodePoolLimitReached";
/// Reason of the Event on a NodePool that can launch no instance type.
pub const NO_TYPES_REASON: &str = "NoCompatibleInstanceTypes";

#[derive(Debug, Default)]
pub struct Decisions {
    pub claims: Vec<NewClaim>,
    /// `(pod, target)`: pods placed onto a Node (`node/<name>`) or an in-flight NodeClaim (`nodeclaim/<name>`).
    pub nominated: Vec<(String, String)>,
    pub unschedulable: Vec<Unschedulable>,
    /// How many of the unschedulable pods were refused before the solve (requirements that cannot be read,
    /// invalid volumes): Karpenter's ignored pods.
    pub ignored: usize,
    pub pool_warnings: Vec<PoolWarning>,
    /// Pending pods (not those of nodes being deleted) by the zone their constraints hold them to, as the first
    /// solve found it (Karpenter's `pending_pods_by_effective_zone_count`).
    pub effective_zones: BTreeMap<String, usize>,
}

impl Decisions {
    /// The nodes (Node names, or claim names of claims in flight) pods were nominated onto, each with its pods in
    /// the order the solve placed them, the nodes in order of their first pod: what drivers nominate and bind.
    pub fn nominated_nodes(&self) -> Vec<(&str, Vec<&str>)> {
        let mut nodes: Vec<(&str, Vec<&str>)> = Vec::new();
        for (pod, target) in &self.nominated {
            let node = target
                .split_once('/')
                .map_or(target.as_str(), |(_, name)| name);
            match nodes.iter_mut().find(|(n, _)| *n == node) {
                Some((_, pods)) => pods.push(pod),
                None => nodes.push((node, vec![pod])),
            }
        }
        nodes
    }
}

/// Decides for `to_solve` (a subset of `snapshot.pods`) given each class's catalog by class name, reusing the
/// `preparations` of earlier decisions where they still hold. Pools whose class has no catalog (missing or not
/// resolvable) are left out; the caller reports why. Nodes and claims being deleted are no capacity.
pub fn decide(
    snapshot: &Snapshot,
    to_solve: &[&Pod],
    catalogs: &BTreeMap<String, Arc<Catalog>>,
    preparations: &mut Preparations,
) -> Result<Decisions, ClusterError> {
    let to_solve: Vec<Solvable> = to_solve.iter().map(|p| Solvable::Pod(p)).collect();
    decide_for(snapshot, &to_solve, catalogs, preparations)
}

/// [`decide`] for pods some of which are [`Replicas`] sharing a template: the template is read once for all of
/// them, and each replica is decided for exactly as its own Pod object would be.
pub fn decide_for(
    snapshot: &Snapshot,
    to_solve: &[Solvable],
    catalogs: &BTreeMap<String, Arc<Catalog>>,
    preparations: &mut Preparations,
) -> Result<Decisions, ClusterError> {
    preparations.retain(catalogs);
    let mut decisions = Decisions::default();
    let mut read = Read::default();
    for item in to_solve {
        match item {
            Solvable::Pod(pod) => read.add(pod, pod_info(snapshot, pod), &mut decisions),
            Solvable::Replicas(replicas) => {
                let Some(first) = replicas.indices.clone().next() else {
                    continue;
                };
                let first_pod = replicas.pod(first);
                let info = pod_info(snapshot, &first_pod);
                // The template read once serves every replica when nothing read depends on the replica's name: a
                // refusal names the pod, a bound pod's claim identity its node, and a generic ephemeral
                // volume's claim is named after the pod.
                let shared = info
                    .as_ref()
                    .ok()
                    .filter(|_| !has_ephemeral_volume(&replicas.template))
                    .cloned();
                read.add(&first_pod, info, &mut decisions);
                let first_key = replicas.key(first);
                match shared.filter(|_| read.pending.contains(&first_key)) {
                    Some(info) => {
                        for i in replicas.indices.clone().skip(1) {
                            let key = replicas.key(i);
                            let mut info = info.clone();
                            info.uid.clone_from(&key);
                            info.key.clone_from(&key);
                            read.identities.insert(key.clone(), key.clone());
                            read.pending.insert(key);
                            read.pods.push(info);
                        }
                    }
                    None => {
                        for pod in replicas.pods().skip(1) {
                            read.add(&pod, pod_info(snapshot, &pod), &mut decisions);
                        }
                    }
                }
            }
        }
    }
    let Read {
        mut pods,
        identities,
        pending,
    } = read;
    let all_types = merged(catalogs);
    let leaving = snapshot.leaving();
    // Shared, not copied: the solve only reads them.
    let nodes: Vec<&Node> = snapshot
        .nodes
        .iter()
        .map(AsRef::as_ref)
        .filter(|n| {
            n.metadata
                .name
                .as_ref()
                .is_none_or(|name| !leaving.nodes.contains(name))
        })
        .collect();
    // A claim whose class has no catalog and that has not launched has no size anyone can know.
    let claims: Vec<&NodeClaim> = snapshot
        .node_claims
        .iter()
        .map(AsRef::as_ref)
        .filter(|c| {
            c.status.as_ref().is_some_and(|s| s.capacity.is_some())
                || catalogs.contains_key(&c.spec.node_class_ref.name)
        })
        .filter(|c| {
            c.metadata
                .name
                .as_ref()
                .is_none_or(|name| !leaving.claims.contains(name))
        })
        .collect();
    let cluster = Cluster::from_objects(
        &nodes,
        &claims,
        &snapshot.daemon_sets,
        &snapshot.pods,
        &all_types,
    )?
    .with_volume_limits(&snapshot.volumes, &snapshot.pods);
    let node_names: BTreeSet<&str> = snapshot
        .nodes
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let usage = usage::by_pool(snapshot.node_claims.iter().map(AsRef::as_ref));
    let mut shared_pools: HashMap<String, Arc<NodePool>> = HashMap::new();
    let groups = groups(&snapshot.node_pools);
    let last = groups.iter().rposition(|(c, _)| catalogs.contains_key(*c));
    let first = groups.iter().position(|(c, _)| catalogs.contains_key(*c));
    for (index, (class, pools)) in groups.iter().enumerate() {
        if pods.is_empty() {
            break;
        }
        let Some(catalog) = catalogs.get(*class) else {
            continue;
        };
        let prepared = preparations.get(
            class,
            pools,
            catalog,
            &snapshot.daemon_sets,
            &cluster.daemonsets,
        );
        let scheduler = Scheduler::prepared(catalog, prepared)
            .with_min_values_policy(snapshot.policies.min_values);
        for template in scheduler.templates() {
            if let Some(why) = &template.unusable {
                let reason = if why.contains("limit") {
                    LIMIT_REASON
                } else {
                    NO_TYPES_REASON
                };
                decisions.pool_warnings.push(PoolWarning {
                    nodepool: template.nodepool.clone(),
                    reason,
                    message: why.clone(),
                });
            }
        }
        let plan = scheduler.solve_on(&pods, &cluster.nodes);
        // The first solve sees every pod; the later ones only those it left.
        if Some(index) == first {
            for (pod, zone) in pods.iter().zip(&plan.effective_zones) {
                if pending.contains(&pod.key) {
                    *decisions.effective_zones.entry(zone.clone()).or_default() += 1;
                }
            }
        }
        for placement in plan.existing {
            let target = if node_names.contains(placement.node.as_str()) {
                format!("node/{}", placement.node)
            } else {
                format!("nodeclaim/{}", placement.node)
            };
            decisions
                .nominated
                .extend(placement.pods.into_iter().map(|p| (p, target.clone())));
        }
        // Only NodeOverlays mark types; without them no claim is looked at for the overlay annotations.
        let overlaid = catalog
            .instance_types
            .iter()
            .any(|it| it.overlaid != crate::catalog::Overlaid::default());
        for mut planned in plan.claims {
            let Some(pool) = pools
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(&planned.nodepool))
            else {
                continue;
            };
            let pool_usage = usage.get(&planned.nodepool).cloned().unwrap_or_default();
            if let Some(resource) = usage::over_limit(pool, &pool_usage) {
                refuse_over_limit(&mut decisions, &planned.nodepool, &resource, planned.pods);
                continue;
            }
            let pod_uids: Vec<String> = planned
                .pods
                .iter()
                .filter_map(|p| identities.get(p).cloned())
                .collect();
            let annotations = if overlaid {
                crate::engine::overlay::claim_annotations(
                    catalog,
                    &planned.nodepool,
                    planned.instance_types.iter().map(|t| t.as_ref()),
                )
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect()
            } else {
                Vec::new()
            };
            let pool = shared_pools
                .entry(planned.nodepool.clone())
                .or_insert_with(|| Arc::new(pool.clone()))
                .clone();
            let uids: Vec<&str> = pod_uids.iter().map(String::as_str).collect();
            let name = claim::name(&planned.nodepool, &uids);
            let pods = std::mem::take(&mut planned.pods);
            decisions.claims.push(NewClaim {
                nodepool: planned.nodepool.clone(),
                choice: planned.cheapest.clone(),
                pods,
                object: ClaimObject::Planned(Box::new(PlannedObject {
                    name,
                    pool,
                    planned,
                    pod_uids,
                    annotations,
                })),
            });
        }
        for unschedulable in &plan.unschedulable {
            for pool in limited_pools(&unschedulable.reason, pools) {
                let warning = PoolWarning {
                    nodepool: pool.to_owned(),
                    reason: LIMIT_REASON,
                    message: unschedulable.reason.clone(),
                };
                if !decisions.pool_warnings.contains(&warning) {
                    decisions.pool_warnings.push(warning);
                }
            }
        }
        // Pods this group could not place are tried on the next one; the last group's reasons stand.
        let left: BTreeSet<&str> = plan.unschedulable.iter().map(|u| u.pod.as_str()).collect();
        pods.retain(|p| left.contains(p.key.as_str()));
        if pods.is_empty() || Some(index) == last {
            decisions.unschedulable.extend(plan.unschedulable);
        }
    }
    // Pods no group looked at (no usable pool at all).
    let decided: BTreeSet<&str> = decisions
        .unschedulable
        .iter()
        .map(|u| u.pod.as_str())
        .collect();
    let unplaced: Vec<Unschedulable> = pods
        .iter()
        .filter(|p| !decided.contains(p.key.as_str()))
        .map(|p| {
            Unschedulable::new(
                p.key.clone(),
                "no ready NodePool with a ready EC2NodeClass can launch nodes",
            )
        })
        .collect();
    decisions.unschedulable.extend(unplaced);
    Ok(decisions)
}

/// Whether `pod` names a node (`spec.nodeName`), whatever its phase.
fn has_node(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

fn has_ephemeral_volume(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| v.ephemeral.is_some())
}

/// The pods a decision solves for, as the solve reads them.
#[derive(Default)]
struct Read {
    pods: Vec<PodInfo>,
    /// Each pod's [`claim_identity`] by its key.
    identities: HashMap<String, String>,
    /// The keys of the pods that wait for a node (not those on a node being deleted).
    pending: BTreeSet<String>,
}

impl Read {
    /// `pod`, read as `info`, or refused before the solve (Karpenter's ignored pods).
    fn add(&mut self, pod: &Pod, info: Result<PodInfo, String>, decisions: &mut Decisions) {
        match info {
            Ok(info) => {
                self.identities
                    .insert(info.key.clone(), claim_identity(pod));
                let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
                if !has_node(pod) && phase.is_none_or(|p| p == "Pending") {
                    self.pending.insert(info.key.clone());
                }
                self.pods.push(info);
            }
            Err(reason) => {
                decisions.ignored += 1;
                decisions
                    .unschedulable
                    .push(Unschedulable::new(pod_key(pod), reason));
            }
        }
    }
}

/// What the solve reads of `pod`, or why it cannot be solved for. A pending pod's claims must be valid
/// (controller-behaviour.md §1.1, ignored pods); a pod still on a node being deleted is not checked, only placed
/// where its volumes are, as Karpenter does.
fn pod_info(snapshot: &Snapshot, pod: &Pod) -> Result<PodInfo, String> {
    let alternatives = if has_node(pod) {
        snapshot.volumes.requirements(pod)
    } else {
        snapshot.volumes.pending(pod)
    }
    .map_err(|error| error.to_string())?;
    let mut info = PodInfo::from_pod(&snapshot.policies.apply(pod, &snapshot.default_spread))
        .map_err(|error| error.to_string())?;
    volumes::apply(&mut info, &alternatives);
    info.attached = snapshot.volumes.attached(pod);
    Ok(info)
}

/// What a pod adds to the name of the claim planned for it: its UID, and for a pod still on a node (one being
/// deleted) that node too. The claim that node runs on was named after the same pods' UIDs when they were
/// pending, and the replacement must not be taken for it (a create would answer AlreadyExists); while the
/// pods stay where they are, every pass and restart still names the replacement alike.
fn claim_identity(pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    match pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        Some(node) if !node.is_empty() => format!("{uid}@{node}"),
        _ => uid.to_owned(),
    }
}

/// The pods of a claim refused because its pool is already over a limit.
fn refuse_over_limit(decisions: &mut Decisions, pool: &str, resource: &str, pods: Vec<String>) {
    let message = format!("nodepool {pool} is over its {resource} limit");
    let warning = PoolWarning {
        nodepool: pool.to_owned(),
        reason: LIMIT_REASON,
        message: message.clone(),
    };
    if !decisions.pool_warnings.contains(&warning) {
        decisions.pool_warnings.push(warning);
    }
    decisions.unschedulable.extend(
        pods.into_iter()
            .map(|pod| Unschedulable::new(pod, message.clone())),
    );
}

/// The pools a solve's reason says ran into their limits (the solve ends those reasons with `for nodepool <name>`).
fn limited_pools<'p>(reason: &str, pools: &'p [NodePool]) -> Vec<&'p str> {
    if !reason.contains("limit") {
        return Vec::new();
    }
    // With several pools the reason lists each (`nodepool a: …; nodepool b: …`): each part names its pool last.
    pools
        .iter()
        .filter_map(|p| p.metadata.name.as_deref())
        .filter(|name| {
            let tail = format!("for nodepool {name}");
            reason
                .split("; ")
                .any(|part| part.contains("limit") && part.ends_with(&tail))
        })
        .collect()
}

/// Whether `pool` says it is not `Ready` (its class missing or not ready, its spec invalid): Karpenter does not
/// launch from such a pool. A pool without the condition (written by hand in a scenario, or not yet seen by the
/// readiness controller) is tried.
pub fn not_ready(pool: &NodePool) -> bool {
    pool.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == crate::engine::conditions::READY && c.status != "True")
}

/// The pools by EC2NodeClass name (pools that are not ready left out), the groups in the order of their heaviest pool (weight descending, then
/// name in reverse, as the solve orders pools). Deleting pools are left to the solve to drop.
fn groups(pools: &[NodePool]) -> Vec<(&str, Vec<NodePool>)> {
    let mut by_class: BTreeMap<&str, Vec<NodePool>> = BTreeMap::new();
    for pool in pools.iter().filter(|p| !not_ready(p)) {
        by_class
            .entry(pool.spec.template.spec.node_class_ref.name.as_str())
            .or_default()
            .push(pool.clone());
    }
    let mut groups: Vec<(&str, Vec<NodePool>)> = by_class.into_iter().collect();
    groups.sort_by_key(|(_, pools)| {
        pools
            .iter()
            .map(|p| {
                (
                    Reverse(p.spec.weight.unwrap_or(0)),
                    Reverse(p.metadata.name.clone()),
                )
            })
            .min()
    });
    groups
}

/// Every class's instance types, once each by name: the sizes of claims in flight come from here. With one
/// class (the usual case) that is its catalog, not a copy.
fn merged(catalogs: &BTreeMap<String, Arc<Catalog>>) -> Cow<'_, Catalog> {
    if catalogs.len() == 1 {
        if let Some(only) = catalogs.values().next() {
            return Cow::Borrowed(only.as_ref());
        }
    }
    let mut seen = BTreeSet::new();
    let instance_types = catalogs
        .values()
        .flat_map(|c| c.instance_types.iter())
        .filter(|it| seen.insert(it.name.clone()))
        .cloned()
        .collect();
    Cow::Owned(Catalog { instance_types })
}

/// `namespace/name`, as the solve names pods.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or("default"),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}
