//! A scenario: ordinary Kubernetes objects (NodePools, EC2NodeClasses, Pods and the workloads that make them,
//! Nodes, NodeClaims, DaemonSets, PodDisruptionBudgets, PersistentVolumeClaims, PersistentVolumes,
//! StorageClasses and Services) plus an optional `kerf.sh/v1alpha1 Simulation` document with settings. Loading is
//! pure: the caller reads the files.

mod workloads;

use super::events::{admit, Action, Timeline};
pub use super::settings::SimulationSettings;
use super::sizes::{negative_quantities, ScenarioLimits};
use crate::admission::{self, Admitted};
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::api::validation::{FieldError, Invalid};
pub use crate::api::well_known::PODS_LISTED;
use crate::engine::buffers;
use crate::engine::provisioning::replicas::{Replicas, Solvable};
use crate::manifest::{group_kind, parse_documents, Document, Identities, Limits, ManifestError};
use crate::scheduling::volumes::{self, VolumeIndex};
use crate::scheduling::{ClusterError, DefaultSpread, PodError};
use k8s_openapi::api::apps::v1::{
    DaemonSet, ReplicaSet, ReplicaSetSpec, StatefulSet, StatefulSetSpec,
};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use workloads::{controller_of, replicas, workload_key};
pub(super) use workloads::{expand, pods_listed};

#[derive(Clone, Debug, Default)]
pub struct Scenario {
    pub settings: SimulationSettings,
    /// Defaulted and validated.
    pub nodepools: Vec<NodePool>,
    /// Pending pods, and pods already bound to a node (`spec.nodeName`); shared with the snapshot a simulation
    /// decides on rather than copied into it (a pod is kilobytes, and scenarios run to 100,000 of them).
    /// Replicas of workloads are here only when their template cannot be shared ([`Scenario::replicas`]).
    pub pods: Vec<Arc<Pod>>,
    /// Workloads' pending replicas that share their template, each with its place among `pods`: it comes
    /// before `pods[at]` (after all of them when `at` is their number). [`Scenario::every_pod`] makes each
    /// replica a Pod object of its own.
    pub replicas: Vec<(usize, Replicas)>,
    /// Existing capacity.
    pub nodes: Vec<Node>,
    /// NodeClaims of kerf's nodes, and in-flight ones without a node yet.
    pub nodeclaims: Vec<NodeClaim>,
    pub daemonsets: Vec<DaemonSet>,
    /// Accepted and kept for disruption; the provisioning simulation does not use them.
    pub disruption_budgets: Vec<PodDisruptionBudget>,
    /// EC2NodeClasses, defaulted, by name: a timeline notices when one changes under its nodes (drift).
    pub nodeclasses: Vec<Value>,
    /// The Deployments, ReplicaSets, StatefulSets and Jobs whose pods are in `pods`, as written.
    pub workloads: Vec<Value>,
    /// Services: with the workloads' selectors, what deduces a pod's default spread selector.
    pub services: Vec<Service>,
    /// The pods' claims; one that names a volume the scenario holds counts as bound (the PersistentVolume
    /// controller's `pv.kubernetes.io/bind-completed` is added).
    pub persistent_volume_claims: Vec<PersistentVolumeClaim>,
    pub persistent_volumes: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
    /// How many volumes each CSI driver may attach to each node.
    pub csi_nodes: Vec<CSINode>,
    /// NodeOverlays, validated: in force with the `NodeOverlay` gate (`spec.featureGates.nodeOverlay`), listed in
    /// `ignored` without it.
    pub nodeoverlays: Vec<crate::api::nodeoverlay::NodeOverlay>,
    /// CapacityBuffers, validated: in force with the `CapacityBuffer` gate, listed in `ignored` without it.
    pub capacity_buffers: Vec<crate::api::capacitybuffer::CapacityBuffer>,
    /// PodTemplates, which buffers may name.
    pub pod_templates: Vec<k8s_openapi::api::core::v1::PodTemplate>,
    /// The `duration` and `events` of the Simulation document, checked; `None` without a `duration`.
    pub timeline: Option<Timeline>,
    /// Objects of kinds the simulation does not model yet, as `Kind/name`.
    pub ignored: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// Every object the scenario cannot hold, one line each.
    #[error("{}", .0.join("\n"))]
    Invalid(Vec<String>),
    /// More pods than the limit, found before any is made.
    #[error("document {document}: {kind} {name:?}: {field}: {wanted} pods would make {total} in the scenario, more than the limit of {limit} (raise it with --max-pods)")]
    TooManyPods {
        document: usize,
        kind: String,
        name: String,
        field: String,
        wanted: u64,
        total: u64,
        limit: u64,
    },
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Pod(#[from] PodError),
    #[error("Simulation {0}")]
    Timeline(String),
    #[error("{kind} {name:?}: {source}")]
    Object {
        kind: String,
        name: String,
        #[source]
        source: serde_json::Error,
    },
}

/// Parses, defaults and validates a scenario, and expands workloads into their pods, within the default limits.
pub fn load(text: &str) -> Result<Scenario, ScenarioError> {
    from_documents(
        parse_documents(text, &Limits::default())?,
        &ScenarioLimits::default(),
    )
}

impl Scenario {
    /// Every pod of the scenario as a Pod object of its own, in document order.
    pub fn every_pod(&self) -> Vec<Arc<Pod>> {
        let mut pods = Vec::with_capacity(self.pods.len());
        for place in places(self.pods.len(), &self.replicas) {
            match place {
                Place::Pod(i) => pods.push(self.pods[i].clone()),
                Place::Replicas(i) => pods.extend(self.replicas[i].1.pods().map(Arc::new)),
            }
        }
        pods
    }

    /// The virtual pods of the scenario's CapacityBuffers ([`buffers::resolve`], the controller's engine), a
    /// `scalableRef` workload at `replicas_of(namespace, name)` replicas (its current count in a timeline).
    pub fn buffer_pods(&self, replicas_of: impl Fn(&str, &str) -> Option<i32>) -> Vec<Pod> {
        self.capacity_buffers
            .iter()
            .flat_map(|buffer| {
                let namespace = buffer.metadata.namespace.as_deref().unwrap_or("default");
                let workload = match buffers::workload_ref(buffer) {
                    Ok(Some((kind, name))) => {
                        Ok(self.workload(kind, name, namespace).map(|template| {
                            let replicas = replicas_of(namespace, name);
                            (template, replicas)
                        }))
                    }
                    _ => Ok(None),
                };
                match buffers::resolve(buffer, &self.pod_templates, workload) {
                    Ok(resolved) => buffers::pods_of(buffer, &resolved).1,
                    Err(_) => Vec::new(),
                }
            })
            .collect()
    }

    /// The replicas a scenario workload was written with (absent: 1).
    pub fn written_replicas(&self, namespace: &str, name: &str) -> Option<i32> {
        let workload = self.workloads.iter().find(|w| {
            w.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
                && w.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    == namespace
        })?;
        Some(
            workload
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .map_or(1, |r| i32::try_from(r).unwrap_or(i32::MAX)),
        )
    }

    /// The pod template of the scenario's `apps` workload `kind`/`name` in `namespace`.
    fn workload(
        &self,
        kind: &str,
        name: &str,
        namespace: &str,
    ) -> Option<k8s_openapi::api::core::v1::PodTemplateSpec> {
        let found = self.workloads.iter().find(|w| {
            w.get("kind").and_then(Value::as_str) == Some(kind)
                && w.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
                && w.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("default")
                    == namespace
        })?;
        serde_json::from_value(found.pointer("/spec/template")?.clone()).ok()
    }
}

/// Defaults and validates the objects of a scenario, and expands workloads into their pods, within `limits`.
pub fn from_documents(
    documents: Vec<Document>,
    limits: &ScenarioLimits,
) -> Result<Scenario, ScenarioError> {
    let mut scenario = Scenario::default();
    let mut invalid = Vec::new();
    let mut identities = Identities::default();
    // Pods of the scenario once every workload is expanded; checked before each expansion.
    let mut pods: u64 = 0;
    let mut replicas_of = BTreeMap::new();
    // The names of PersistentVolumes (false) and StorageClasses (true).
    let mut cluster_scoped = BTreeSet::new();
    // RuntimeClasses by name: their `overhead.podFixed`.
    let mut runtime_classes: BTreeMap<String, Value> = BTreeMap::new();
    for document in documents {
        if let Err(err) = identities.admit(&document) {
            invalid.push(format!("document {}: {err}", document.index));
            continue;
        }
        let Document { index, object } = document;
        let (group, kind) = group_kind(&object);
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let bad = |source| ScenarioError::Object {
            kind: kind.to_owned(),
            name: name.clone(),
            source,
        };
        let refuse = |errors: Vec<FieldError>| {
            format!(
                "document {index}: {}",
                Invalid {
                    kind: kind.to_owned(),
                    group: group.to_owned(),
                    name: name.clone(),
                    errors,
                }
            )
        };
        let negative = negative_quantities(kind, &object);
        if !negative.is_empty() {
            invalid.push(refuse(negative));
            continue;
        }
        match (group, kind) {
            ("kerf.sh", "Simulation") => {
                let spec = object.get("spec").cloned().unwrap_or_else(|| json!({}));
                scenario.settings = SimulationSettings::deserialize(&spec).map_err(bad)?;
                if let Err(error) = scenario.settings.disruption() {
                    invalid.push(format!("document {index}: {error}"));
                }
                if let Err(error) = scenario.settings.scheduler_config() {
                    invalid.push(format!("document {index}: {error}"));
                }
            }
            _ if admission::for_kind(group, kind).is_some() => {
                let Some(admission) = admission::for_kind(group, kind) else {
                    continue;
                };
                let Admitted { object, .. } = match admit(admission, &object) {
                    Ok(admitted) => admitted,
                    Err(rejection) => {
                        invalid.push(format!("document {index}: {rejection}"));
                        continue;
                    }
                };
                match kind {
                    "NodePool" => scenario
                        .nodepools
                        .push(NodePool::deserialize(&object).map_err(bad)?),
                    "EC2NodeClass" => scenario.nodeclasses.push(object),
                    "NodeOverlay" => scenario.nodeoverlays.push(
                        crate::api::nodeoverlay::NodeOverlay::deserialize(&object).map_err(bad)?,
                    ),
                    "CapacityBuffer" => scenario.capacity_buffers.push(
                        crate::api::capacitybuffer::CapacityBuffer::deserialize(&object)
                            .map_err(bad)?,
                    ),
                    _ => {}
                }
            }
            ("", "PodTemplate") => scenario
                .pod_templates
                .push(k8s_openapi::api::core::v1::PodTemplate::deserialize(&object).map_err(bad)?),
            ("", "Pod") => {
                pods += 1;
                scenario
                    .pods
                    .push(Arc::new(Pod::deserialize(&object).map_err(bad)?));
            }
            ("", "Node") => scenario
                .nodes
                .push(Node::deserialize(&object).map_err(bad)?),
            ("karpenter.sh", "NodeClaim") => scenario
                .nodeclaims
                .push(NodeClaim::deserialize(&object).map_err(bad)?),
            ("apps", "DaemonSet") => scenario
                .daemonsets
                .push(DaemonSet::deserialize(&object).map_err(bad)?),
            ("policy", "PodDisruptionBudget") => scenario
                .disruption_budgets
                .push(PodDisruptionBudget::deserialize(&object).map_err(bad)?),
            ("", "PersistentVolumeClaim") => scenario
                .persistent_volume_claims
                .push(PersistentVolumeClaim::deserialize(&object).map_err(bad)?),
            // Cluster-scoped: a namespace written on one changes nothing, so a name is taken once whatever it says.
            ("", "PersistentVolume") | ("storage.k8s.io", "StorageClass")
                if !name.is_empty()
                    && !cluster_scoped.insert((kind == "StorageClass", name.clone())) =>
            {
                let resource = if kind == "StorageClass" {
                    "storageclasses.storage.k8s.io"
                } else {
                    "persistentvolumes"
                };
                invalid.push(format!(
                    "document {index}: {resource} {name:?} already exists"
                ));
            }
            ("", "PersistentVolume") => scenario
                .persistent_volumes
                .push(PersistentVolume::deserialize(&object).map_err(bad)?),
            ("storage.k8s.io", "StorageClass") => scenario
                .storage_classes
                .push(StorageClass::deserialize(&object).map_err(bad)?),
            ("node.k8s.io", "RuntimeClass") => {
                let overhead = object
                    .pointer("/overhead/podFixed")
                    .cloned()
                    .unwrap_or(Value::Null);
                runtime_classes.insert(name.clone(), overhead);
            }
            ("storage.k8s.io", "CSINode") => scenario
                .csi_nodes
                .push(CSINode::deserialize(&object).map_err(bad)?),
            ("", "Service") => scenario
                .services
                .push(Service::deserialize(&object).map_err(bad)?),
            ("apps", "Deployment" | "ReplicaSet" | "StatefulSet") | ("batch", "Job") => {
                let (field, count) = match replicas(&object, kind) {
                    Ok(replicas) => replicas,
                    Err(error) => {
                        invalid.push(refuse(vec![error]));
                        continue;
                    }
                };
                let made = if pods_listed(&object) { 0 } else { count };
                let total = pods.saturating_add(made);
                if total > limits.max_pods {
                    return Err(ScenarioError::TooManyPods {
                        document: index,
                        kind: kind.to_owned(),
                        name,
                        field: format!("spec.{field}"),
                        wanted: count,
                        total,
                        limit: limits.max_pods,
                    });
                }
                pods = total;
                // A snapshot lists the workload's running pods one by one: they are not made again.
                if !pods_listed(&object) {
                    let replicas = expand(&object, 0..count).map_err(bad)?;
                    if shareable(&replicas.template) {
                        scenario.replicas.push((scenario.pods.len(), replicas));
                    } else {
                        scenario.pods.extend(replicas.pods().map(Arc::new));
                    }
                }
                replicas_of.insert(workload_key(&object), count);
                scenario.workloads.push(object);
            }
            _ => scenario.ignored.push(format!("{kind}/{name}")),
        }
    }
    invalid.extend(runtime_overhead(&mut scenario, &runtime_classes));
    // Without their gates Karpenter reads no NodeOverlays or CapacityBuffers; the report says they were left out.
    if let Ok(gates) = scenario.settings.feature_gates() {
        if !gates.node_overlay {
            for overlay in std::mem::take(&mut scenario.nodeoverlays) {
                let name = overlay.metadata.name.unwrap_or_default();
                scenario.ignored.push(format!(
                    "NodeOverlay/{name} (the NodeOverlay feature gate is off)"
                ));
            }
        }
        if !gates.capacity_buffer {
            for buffer in std::mem::take(&mut scenario.capacity_buffers) {
                let name = buffer.metadata.name.unwrap_or_default();
                scenario.ignored.push(format!(
                    "CapacityBuffer/{name} (the CapacityBuffer feature gate is off)"
                ));
            }
        }
    }
    if !invalid.is_empty() {
        return Err(ScenarioError::Invalid(invalid));
    }
    volumes::complete_bindings(
        &mut scenario.persistent_volume_claims,
        &scenario.persistent_volumes,
    );
    scenario.timeline = Timeline::from_settings(&scenario.settings, limits)
        .map_err(|e| ScenarioError::Timeline(e.to_string()))?;
    if let Some(timeline) = &scenario.timeline {
        check_scaled_pods(timeline, pods, replicas_of, limits)?;
    }
    Ok(scenario)
}

/// Whether a workload's replicas can share `template` here: each waits for a node, and no RuntimeClass is
/// applied to it (that is done pod by pod, and a class that does not exist is refused pod by pod). What else
/// depends on a replica's name, the decision reads per replica ([`plan::decide_for`]).
///
/// [`plan::decide_for`]: crate::engine::provisioning::plan::decide_for
fn shareable(template: &Pod) -> bool {
    template.spec.as_ref().is_none_or(|spec| {
        spec.runtime_class_name.is_none() && spec.node_name.as_deref().is_none_or(str::is_empty)
    })
}

/// `pods` and `replicas` ([`Scenario::replicas`]) in their order.
pub(super) fn in_order<'p>(
    pods: &'p [Arc<Pod>],
    replicas: &'p [(usize, Replicas)],
) -> Vec<Solvable<'p>> {
    places(pods.len(), replicas)
        .into_iter()
        .map(|place| match place {
            Place::Pod(i) => Solvable::Pod(&pods[i]),
            Place::Replicas(i) => Solvable::Replicas(&replicas[i].1),
        })
        .collect()
}

/// An index into a scenario's pods or into its replicas.
enum Place {
    Pod(usize),
    Replicas(usize),
}

/// The order of `pods` pods and of `replicas`, each of which comes before the pod its place names.
fn places(pods: usize, replicas: &[(usize, Replicas)]) -> Vec<Place> {
    let mut order = Vec::with_capacity(pods + replicas.len());
    let mut next = replicas.iter().map(|(at, _)| *at).enumerate().peekable();
    for pod in 0..pods {
        while let Some((r, _)) = next.next_if(|(_, at)| *at <= pod) {
            order.push(Place::Replicas(r));
        }
        order.push(Place::Pod(pod));
    }
    order.extend(next.map(|(r, _)| Place::Replicas(r)));
    order
}

/// What the apiserver's RuntimeClass admission does to a pod created with `runtimeClassName`: its class's fixed
/// overhead becomes the pod's `spec.overhead` (which scheduling adds to the pod's requests); a class that does
/// not exist refuses the pod. Applied to pods and to workloads' templates (replicas made later too).
fn runtime_overhead(scenario: &mut Scenario, classes: &BTreeMap<String, Value>) -> Vec<String> {
    let mut refused = Vec::new();
    let mut overhead_of = |class: &str, what: String| match classes.get(class) {
        Some(Value::Null) => None,
        Some(overhead) => Some(overhead.clone()),
        None => {
            refused.push(format!(
                "{what}: spec.runtimeClassName: RuntimeClass {class:?} not found"
            ));
            None
        }
    };
    for pod in &mut scenario.pods {
        // Nothing else holds the pods yet: no copy is made.
        let pod = Arc::make_mut(pod);
        let Some(spec) = pod.spec.as_mut() else {
            continue;
        };
        let Some(class) = spec.runtime_class_name.clone() else {
            continue;
        };
        let what = format!(
            "Pod {}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        if let Some(overhead) = overhead_of(&class, what) {
            if spec.overhead.is_none() {
                spec.overhead = serde_json::from_value(overhead).ok();
            }
        }
    }
    for workload in &mut scenario.workloads {
        let what = format!(
            "{} {}",
            workload["kind"].as_str().unwrap_or_default(),
            workload["metadata"]["name"].as_str().unwrap_or_default()
        );
        let Some(spec) = workload.pointer_mut("/spec/template/spec") else {
            continue;
        };
        let Some(class) = spec["runtimeClassName"].as_str().map(str::to_owned) else {
            continue;
        };
        if let Some(overhead) = overhead_of(&class, what) {
            if spec.get("overhead").is_none_or(Value::is_null) {
                spec["overhead"] = overhead;
            }
        }
    }
    refused.sort();
    refused.dedup();
    refused
}

impl Scenario {
    /// The scenario's default spread (`spec.schedulerConfig`) with its Services and workloads to deduce pods'
    /// selectors from; the reason when the setting is refused.
    pub fn default_spread(&self) -> Result<DefaultSpread, String> {
        let mut spread = DefaultSpread::new(&self.settings.scheduler_config()?);
        if !spread.is_active() {
            return Ok(spread);
        }
        for service in &self.services {
            spread.add_service(service);
        }
        for workload in &self.workloads {
            let Some(owner) = controller_of(workload) else {
                continue;
            };
            let metadata = ObjectMeta {
                name: Some(owner.name),
                namespace: workload
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                ..ObjectMeta::default()
            };
            // A selector that does not read as one selects nothing of its own (the apiserver would refuse it).
            let selector: LabelSelector = workload
                .pointer("/spec/selector")
                .and_then(|s| LabelSelector::deserialize(s).ok())
                .unwrap_or_default();
            match owner.kind {
                "StatefulSet" => spread.add_stateful_set(&StatefulSet {
                    metadata,
                    spec: StatefulSetSpec {
                        selector,
                        ..StatefulSetSpec::default()
                    },
                    status: None,
                }),
                "ReplicaSet" => spread.add_replica_set(&ReplicaSet {
                    metadata,
                    spec: ReplicaSetSpec {
                        selector,
                        ..ReplicaSetSpec::default()
                    },
                    status: None,
                }),
                _ => {}
            }
        }
        Ok(spread)
    }

    /// The scenario's claims, volumes and classes, as the solve looks them up.
    pub fn volumes(&self) -> VolumeIndex {
        VolumeIndex::from_objects(
            self.persistent_volume_claims.iter().cloned().map(Arc::new),
            self.persistent_volumes.iter().cloned().map(Arc::new),
            self.storage_classes.iter().cloned().map(Arc::new),
        )
        .with_csi_nodes(self.csi_nodes.iter().cloned().map(Arc::new))
    }
}

/// Refuses a timeline whose scale events would, at some point, make more pods than the limit.
fn check_scaled_pods(
    timeline: &Timeline,
    mut pods: u64,
    mut replicas_of: BTreeMap<String, u64>,
    limits: &ScenarioLimits,
) -> Result<(), ScenarioError> {
    for event in &timeline.events {
        let Action::Scale {
            namespace,
            workload,
            replicas,
        } = &event.action
        else {
            continue;
        };
        let before = replicas_of
            .insert(format!("{namespace}/{workload}"), *replicas)
            .unwrap_or(0);
        pods = pods.saturating_sub(before).saturating_add(*replicas);
        if pods > limits.max_pods {
            return Err(ScenarioError::Timeline(format!(
                "spec.events: scaling {namespace}/{workload} to {replicas} replicas makes {pods} pods, more than the limit of {} (raise it with --max-pods)",
                limits.max_pods
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
