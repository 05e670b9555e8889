//! A scenario: ordinary Kubernetes objects (NodePools, EC2NodeClasses, Pods and the workloads that make them,
//! Nodes, NodeClaims, DaemonSets, PodDisruptionBudgets) plus an optional `kerf.sh/v1alpha1 Simulation` document
//! with settings. Loading is pure: the caller reads the files.

use super::events::Timeline;
use crate::admission::{self, Admitted};
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::api::validation::Invalid;
use crate::manifest::{group_kind, parse_documents, ManifestError};
use crate::scheduling::{ClusterError, PodError};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Deserialize;
use serde_json::{json, Value};

/// Settings from the `Simulation` document; paths are relative to the scenario file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SimulationSettings {
    pub region: Option<String>,
    /// An `--instance-types` file replacing the embedded catalog.
    pub instance_types: Option<String>,
    pub pricing_file: Option<String>,
    /// Echoed in the report. The solve is deterministic and draws no random numbers; the seed is kept for
    /// the randomised parts of later simulations, so a scenario states it once.
    pub seed: Option<u64>,
    /// How long a timeline runs on the virtual clock (a Go duration such as `12h`); without it the simulation
    /// is the single solve of today's report.
    pub duration: Option<String>,
    /// When the virtual clock starts (RFC 3339); budgets' cron schedules are read against it.
    pub start: Option<String>,
    /// What happens during the timeline; see [`super::events`].
    #[serde(default)]
    pub events: Vec<Value>,
}

#[derive(Clone, Debug, Default)]
pub struct Scenario {
    pub settings: SimulationSettings,
    /// Defaulted and validated.
    pub nodepools: Vec<NodePool>,
    /// Pending pods, and pods already bound to a node (`spec.nodeName`).
    pub pods: Vec<Pod>,
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
    /// The `duration` and `events` of the Simulation document, checked; `None` without a `duration`.
    pub timeline: Option<Timeline>,
    /// Objects of kinds the simulation does not model yet, as `Kind/name`.
    pub ignored: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Invalid(Vec<Invalid>),
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

/// Parses, defaults and validates a scenario, and expands workloads into their pods.
pub fn load(text: &str) -> Result<Scenario, ScenarioError> {
    let mut scenario = Scenario::default();
    let mut invalid = Vec::new();
    for object in parse_documents(text)? {
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
        match (group, kind) {
            ("kerf.sh", "Simulation") => {
                let spec = object.get("spec").cloned().unwrap_or_else(|| json!({}));
                scenario.settings = SimulationSettings::deserialize(&spec).map_err(bad)?;
            }
            _ if admission::for_kind(group, kind).is_some() => {
                let Some(admission) = admission::for_kind(group, kind) else {
                    continue;
                };
                let Admitted { object, .. } = match admit(admission, &object) {
                    Ok(admitted) => admitted,
                    Err(rejection) => {
                        invalid.push(rejection);
                        continue;
                    }
                };
                match kind {
                    "NodePool" => scenario
                        .nodepools
                        .push(NodePool::deserialize(&object).map_err(bad)?),
                    "EC2NodeClass" => scenario.nodeclasses.push(object),
                    _ => {}
                }
            }
            ("", "Pod") => scenario.pods.push(Pod::deserialize(&object).map_err(bad)?),
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
            ("apps", "Deployment" | "ReplicaSet" | "StatefulSet") | ("batch", "Job") => {
                let count = replicas(&object, kind);
                scenario
                    .pods
                    .extend(expand(&object, 0..count).map_err(bad)?);
                scenario.workloads.push(object);
            }
            _ => scenario.ignored.push(format!("{kind}/{name}")),
        }
    }
    if invalid.is_empty() {
        scenario.timeline = Timeline::from_settings(&scenario.settings)
            .map_err(|e| ScenarioError::Timeline(e.to_string()))?;
        Ok(scenario)
    } else {
        Err(ScenarioError::Invalid(invalid))
    }
}

pub(super) fn admit(
    admission: &admission::KindAdmission,
    object: &Value,
) -> Result<Admitted, Invalid> {
    let admitted = admission.admit(object, None);
    match admitted.rejection(admission) {
        Some(invalid) => Err(invalid),
        None => Ok(admitted),
    }
}

/// How many pods a workload runs: `replicas` (Jobs: `parallelism`), 1 when unset.
fn replicas(workload: &Value, kind: &str) -> u64 {
    let count_field = if kind == "Job" {
        "/spec/parallelism"
    } else {
        "/spec/replicas"
    };
    workload
        .pointer(count_field)
        .and_then(Value::as_u64)
        .unwrap_or(1)
}

/// The pods `indices` of a workload: copies of its template named `<name>-<i>`, with the UID
/// `<namespace>/<name>-<i>`.
pub(super) fn expand(
    workload: &Value,
    indices: std::ops::Range<u64>,
) -> Result<Vec<Pod>, serde_json::Error> {
    let name = workload
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("workload");
    let namespace = workload
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("default");
    let template = workload
        .pointer("/spec/template")
        .cloned()
        .unwrap_or_else(|| json!({}));
    indices
        .map(|i| {
            let mut pod = template.clone();
            let metadata = pod
                .as_object_mut()
                .map(|p| p.entry("metadata").or_insert_with(|| json!({})));
            if let Some(Value::Object(metadata)) = metadata {
                metadata.insert("name".to_owned(), json!(format!("{name}-{i}")));
                metadata.insert("namespace".to_owned(), json!(namespace));
                metadata.insert("uid".to_owned(), json!(format!("{namespace}/{name}-{i}")));
            }
            Pod::deserialize(&pod)
        })
        .collect()
}
