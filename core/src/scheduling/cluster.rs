//! What the cluster already runs, as the solve sees it (controller-behaviour.md §1.2–1.3): existing nodes and
//! in-flight NodeClaims with the pods bound to them, and the DaemonSets whose pods every new node will run.
//!
//! Pure data, built from ordinary Kubernetes objects by [`Cluster::from_objects`]: `kerf simulate` builds it
//! from a scenario, the controller from its watch cache.

use super::pod::{PodError, PodInfo};
use super::taints::is_ephemeral;
use super::volumes::{AttachedVolume, VolumeIndex};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::{Taint, TaintEffect};
use crate::api::requirements::{RequirementError, RequirementTerm, Requirements};
use crate::catalog::{
    Catalog, CatalogError, InstanceType, Resources, CPU, EPHEMERAL_STORAGE, MEMORY, PODS,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};

/// Existing capacity and the DaemonSets; [`Cluster::default`] is an empty cluster.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    pub nodes: Vec<ExistingNode>,
    pub daemonsets: Vec<DaemonSetPod>,
}

/// A node pods may be placed on without launching anything: a Node, or a NodeClaim still without one.
#[derive(Clone, Debug)]
pub struct ExistingNode {
    pub name: String,
    /// The NodePool that launched it (`karpenter.sh/nodepool`), whose limits it uses up.
    pub nodepool: Option<String>,
    /// A Node's labels, each as `key In [value]`; for an in-flight NodeClaim its labels and requirements.
    pub requirements: Requirements,
    pub taints: Vec<Taint>,
    pub capacity: Resources,
    pub allocatable: Resources,
    /// Initialized nodes are tried before the others.
    pub initialized: bool,
    /// An in-flight NodeClaim: well-known labels it does not define yet may still come.
    pub in_flight: bool,
    /// The pods bound to it (terminal and terminating pods left out).
    pub pods: Vec<BoundPod>,
    /// How many volumes each CSI driver may attach to it (its CSINode's `allocatable.count`); a driver not
    /// listed has no limit.
    pub volume_limits: BTreeMap<String, u32>,
    /// The volumes its pods attach, against those limits.
    pub attached: BTreeSet<AttachedVolume>,
}

/// A pod running on an existing node.
#[derive(Clone, Debug)]
pub struct BoundPod {
    pub pod: PodInfo,
    /// `namespace/name` of the DaemonSet that owns it.
    pub daemonset: Option<String>,
}

/// A DaemonSet as the pod it runs on each compatible node: its template with the required node affinity only.
#[derive(Clone, Debug, PartialEq)]
pub struct DaemonSetPod {
    /// `namespace/name` of the DaemonSet.
    pub name: String,
    pub pod: PodInfo,
}

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error("{object}: {resource} {source}")]
    Resources {
        object: String,
        resource: &'static str,
        #[source]
        source: CatalogError,
    },
    #[error("{object}: {source}")]
    Requirements {
        object: String,
        #[source]
        source: RequirementError,
    },
    #[error("NodeClaim {0}: no instance type of the catalog matches its requirements, so its capacity is unknown")]
    UnknownCapacity(String),
}

impl Cluster {
    /// Adds what CSI attach limits need (Karpenter's volume usage): each node's limits from its CSINode in
    /// `volumes`, and the volumes its bound `pods` attach.
    pub fn with_volume_limits<P: Borrow<Pod>>(
        mut self,
        volumes: &VolumeIndex,
        pods: &[P],
    ) -> Cluster {
        let csi_nodes = volumes.csi_nodes();
        if csi_nodes.is_empty() {
            return self;
        }
        let index: BTreeMap<String, usize> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        for csi in csi_nodes {
            let Some(&i) = csi.metadata.name.as_ref().and_then(|n| index.get(n)) else {
                continue;
            };
            for driver in &csi.spec.drivers {
                if let Some(count) = driver.allocatable.as_ref().and_then(|a| a.count) {
                    self.nodes[i]
                        .volume_limits
                        .insert(driver.name.clone(), u32::try_from(count).unwrap_or(0));
                }
            }
        }
        for pod in pods.iter().map(Borrow::borrow) {
            let node = bound_node(pod).and_then(|n| index.get(n));
            if let Some(&i) = node.filter(|i| !self.nodes[**i].volume_limits.is_empty()) {
                self.nodes[i].attached.extend(volumes.attached(pod));
            }
        }
        self
    }

    /// The cluster from its objects. Pods with a `spec.nodeName` are bound to that node (unless terminal or
    /// terminating); NodeClaims whose node is among `nodes` are that node, the others are in flight.
    pub fn from_objects<N: Borrow<Node>, C: Borrow<NodeClaim>, P: Borrow<Pod>>(
        nodes: &[N],
        nodeclaims: &[C],
        daemonsets: &[DaemonSet],
        pods: &[P],
        catalog: &Catalog,
    ) -> Result<Cluster, ClusterError> {
        let node_names: BTreeSet<&str> = nodes
            .iter()
            .map(Borrow::borrow)
            .filter_map(|n: &Node| n.metadata.name.as_deref())
            .collect();
        let claim_of_node: BTreeMap<&str, &NodeClaim> = nodeclaims
            .iter()
            .map(Borrow::borrow)
            .filter_map(|c| Some((c.status.as_ref()?.node_name.as_deref()?, c)))
            .collect();
        let mut existing: Vec<ExistingNode> = nodes
            .iter()
            .map(Borrow::borrow)
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .filter(|n| {
                !n.spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
            })
            .map(|n| {
                let claim = n
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|name| claim_of_node.get(name).copied());
                from_node(n, claim)
            })
            .collect::<Result<_, _>>()?;
        for claim in nodeclaims.iter().map(Borrow::borrow) {
            let node_name = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
            if claim.metadata.deletion_timestamp.is_some()
                || node_name.is_some_and(|n| node_names.contains(n))
            {
                continue;
            }
            existing.push(from_nodeclaim(claim, catalog)?);
        }
        let index: BTreeMap<String, usize> = existing
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        for pod in pods.iter().map(Borrow::borrow) {
            let Some(node) = bound_node(pod) else {
                continue;
            };
            if let Some(&i) = index.get(node) {
                existing[i].pods.push(BoundPod {
                    pod: PodInfo::from_pod(pod)?,
                    daemonset: owner(pod, "DaemonSet"),
                });
            }
        }
        let daemonsets = DaemonSetPod::of_daemonsets(daemonsets, pods.iter().map(Borrow::borrow))?;
        Ok(Cluster {
            nodes: existing,
            daemonsets,
        })
    }
}

impl DaemonSetPod {
    /// The pod each of `daemonsets` runs: its newest pod among `pods` when it has one (what admission really
    /// made of the template: LimitRange defaults, mutating webhooks, a VPA's requests), else its template
    /// (Karpenter's `getDaemonSetPods`).
    pub fn of_daemonsets<'p>(
        daemonsets: &[DaemonSet],
        pods: impl IntoIterator<Item = &'p Pod>,
    ) -> Result<Vec<DaemonSetPod>, PodError> {
        let mut newest: BTreeMap<String, &Pod> = BTreeMap::new();
        for pod in pods {
            let Some(daemonset) = owner(pod, "DaemonSet") else {
                continue;
            };
            let age = |p: &Pod| {
                (
                    p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    p.metadata.name.clone(),
                )
            };
            match newest.get(&daemonset) {
                Some(known) if age(known) >= age(pod) => {}
                _ => {
                    newest.insert(daemonset, pod);
                }
            }
        }
        daemonsets
            .iter()
            .map(|d| {
                let namespace = d.metadata.namespace.as_deref().unwrap_or("default");
                let key = format!(
                    "{namespace}/{}",
                    d.metadata.name.as_deref().unwrap_or_default()
                );
                DaemonSetPod::from_daemonset(d, newest.get(&key).copied())
            })
            .collect()
    }

    /// The pod the DaemonSet runs: `newest`, its latest pod, or else its template; with the template's required
    /// node affinity (the DaemonSet controller pins each pod to its node, which says nothing of new nodes) and
    /// no preferences.
    pub fn from_daemonset(daemonset: &DaemonSet, newest: Option<&Pod>) -> Result<Self, PodError> {
        let meta = &daemonset.metadata;
        let namespace = meta.namespace.as_deref().unwrap_or("default");
        let name = format!("{namespace}/{}", meta.name.as_deref().unwrap_or_default());
        let template = daemonset.spec.template.clone();
        let required = template
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .clone()
            });
        let (mut spec, metadata) = match newest {
            Some(pod) => (
                pod.spec.clone().unwrap_or_default(),
                Some(pod.metadata.clone()),
            ),
            None => (template.spec.unwrap_or_default(), template.metadata),
        };
        if let Some(node_affinity) = spec
            .affinity
            .as_mut()
            .and_then(|a| a.node_affinity.as_mut())
        {
            node_affinity.preferred_during_scheduling_ignored_during_execution = None;
            node_affinity.required_during_scheduling_ignored_during_execution = required;
        }
        spec.node_name = None;
        let mut metadata = metadata.unwrap_or_default();
        metadata.name = Some(name.clone());
        metadata.namespace = Some(namespace.to_owned());
        let pod = Pod {
            metadata,
            spec: Some(spec),
            status: None,
        };
        Ok(DaemonSetPod {
            name,
            pod: PodInfo::from_pod(&pod)?,
        })
    }
}

/// The node a pod runs on, unless it has finished or is going away (then it no longer takes room).
pub fn bound_node(pod: &Pod) -> Option<&str> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if pod.metadata.deletion_timestamp.is_some() || matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// `namespace/name` of the pod's controlling owner of `kind`.
fn owner(pod: &Pod, kind: &str) -> Option<String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == kind)
        .map(|o| format!("{namespace}/{}", o.name))
}

/// `node` as capacity. Until a node kerf launched is initialized, its ephemeral taints and its `claim`'s
/// startup taints are left out (Karpenter's `StateNode.Taints`): pods that tolerate the rest will fit there
/// once it is up, so no second node is launched for them.
fn from_node(node: &Node, claim: Option<&NodeClaim>) -> Result<ExistingNode, ClusterError> {
    let name = node.metadata.name.clone().unwrap_or_default();
    let object = format!("Node {name}");
    let mut node_labels = node.metadata.labels.clone().unwrap_or_default();
    node_labels
        .entry(labels::HOSTNAME.to_owned())
        .or_insert_with(|| name.clone());
    let status = node.status.as_ref();
    let resources = |resource: &'static str, list: Option<&BTreeMap<String, Quantity>>| {
        parse_resources(
            &object,
            resource,
            list.into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.0.as_str())),
        )
    };
    let capacity = resources("capacity", status.and_then(|s| s.capacity.as_ref()))?;
    let allocatable = match status.and_then(|s| s.allocatable.as_ref()) {
        Some(list) => resources("allocatable", Some(list))?,
        None => capacity.clone(),
    };
    // Nodes kerf launched are ready for pods once initialized; nodes it did not launch always are.
    let initialized = !node_labels.contains_key(labels::NODEPOOL)
        || node_labels
            .get(labels::NODE_INITIALIZED)
            .map(String::as_str)
            == Some("true");
    let (mut capacity, mut allocatable) = (capacity, allocatable);
    if !initialized {
        // A kubelet that has just registered reports some resources (extended ones especially) as zero until
        // its device plugins start: until then the claim's figures stand in for them, as in Karpenter's state.
        if let Some(status) = claim.and_then(|c| c.status.as_ref()) {
            let claim_object = format!("NodeClaim of {object}");
            if let Some(list) = &status.capacity {
                fill_missing(
                    &mut capacity,
                    &claim_resources(&claim_object, "capacity", list)?,
                );
            }
            if let Some(list) = &status.allocatable {
                fill_missing(
                    &mut allocatable,
                    &claim_resources(&claim_object, "allocatable", list)?,
                );
            }
        }
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let effect = match t.effect.as_str() {
                "NoSchedule" => TaintEffect::NoSchedule,
                "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
                "NoExecute" => TaintEffect::NoExecute,
                _ => return None,
            };
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect,
                time_added: None,
            })
        })
        .filter(|t: &Taint| {
            initialized
                || !(is_ephemeral(t)
                    || claim
                        .and_then(|c| c.spec.startup_taints.as_ref())
                        .is_some_and(|startup| {
                            startup
                                .iter()
                                .any(|s| s.key == t.key && s.effect == t.effect)
                        }))
        })
        .collect();
    Ok(ExistingNode {
        nodepool: node_labels.get(labels::NODEPOOL).cloned(),
        requirements: Requirements::from_labels(&node_labels),
        name,
        taints,
        capacity,
        allocatable,
        initialized,
        in_flight: false,
        pods: Vec::new(),
        volume_limits: BTreeMap::new(),
        attached: BTreeSet::new(),
    })
}

/// A NodeClaim status's resource list (quantities written as strings or integers).
fn claim_resources(
    object: &str,
    resource: &'static str,
    list: &BTreeMap<String, IntOrString>,
) -> Result<Resources, ClusterError> {
    parse_resources(
        object,
        resource,
        list.iter().map(|(k, v)| {
            let text = match v {
                IntOrString::Int(n) => n.to_string(),
                IntOrString::String(s) => s.clone(),
            };
            (k.clone(), text)
        }),
    )
}

/// `into`'s zero resources taken from `from`.
fn fill_missing(into: &mut Resources, from: &Resources) {
    let core = [
        (CPU, from.cpu),
        (MEMORY, from.memory),
        (PODS, from.pods),
        (EPHEMERAL_STORAGE, from.ephemeral_storage),
    ];
    let extended = from.extended.iter().map(|(k, v)| (k.as_str(), *v));
    for (name, amount) in core.into_iter().chain(extended) {
        if into.get(name) == 0 && amount != 0 {
            into.set(name, amount);
        }
    }
}

/// An in-flight NodeClaim as a node: its labels and requirements, and the resources of its instance type (from
/// its status once launched, else the smallest type its requirements allow).
fn from_nodeclaim(claim: &NodeClaim, catalog: &Catalog) -> Result<ExistingNode, ClusterError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let object = format!("NodeClaim {name}");
    let mut claim_labels = claim.metadata.labels.clone().unwrap_or_default();
    claim_labels
        .entry(labels::HOSTNAME.to_owned())
        .or_insert_with(|| name.clone());
    let mut requirements = Requirements::from_labels(&claim_labels);
    let terms = Requirements::from_terms(claim.spec.requirements.iter().map(|r| RequirementTerm {
        key: r.key.clone(),
        operator: r.operator,
        values: r.values.clone().unwrap_or_default(),
        min_values: None,
    }))
    .map_err(|source| ClusterError::Requirements {
        object: object.clone(),
        source,
    })?;
    requirements.add_all(&terms);
    // Smallest first, so that the search usually ends at the first type the claim allows (the sort is stable:
    // among equals the catalog's first still wins).
    let mut by_size: Vec<&InstanceType> = catalog.instance_types.iter().collect();
    by_size.sort_by_key(|it| (it.capacity.cpu, it.capacity.memory));
    let smallest = by_size
        .into_iter()
        .find(|it| it.meets(&requirements))
        .ok_or_else(|| ClusterError::UnknownCapacity(name.clone()))?;
    let status = claim.status.as_ref();
    let resources = |resource: &'static str,
                     list: Option<&BTreeMap<String, IntOrString>>,
                     fallback: Resources| {
        match list {
            Some(list) => claim_resources(&object, resource, list),
            None => Ok(fallback),
        }
    };
    let capacity = resources(
        "capacity",
        status.and_then(|s| s.capacity.as_ref()),
        smallest.capacity.clone(),
    )?;
    let allocatable = resources(
        "allocatable",
        status.and_then(|s| s.allocatable.as_ref()),
        smallest.allocatable(),
    )?;
    Ok(ExistingNode {
        nodepool: claim_labels.get(labels::NODEPOOL).cloned(),
        requirements,
        name,
        taints: claim.spec.taints.clone().unwrap_or_default(),
        capacity,
        allocatable,
        initialized: false,
        in_flight: true,
        pods: Vec::new(),
        volume_limits: BTreeMap::new(),
        attached: BTreeSet::new(),
    })
}

/// A resource list of `object` (its `resource`: capacity or allocatable), with an error naming both.
fn parse_resources<K: AsRef<str>, V: AsRef<str>>(
    object: &str,
    resource: &'static str,
    list: impl IntoIterator<Item = (K, V)>,
) -> Result<Resources, ClusterError> {
    Resources::from_quantities(list).map_err(|source| ClusterError::Resources {
        object: object.to_owned(),
        resource,
        source,
    })
}
