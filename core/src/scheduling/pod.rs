//! What the scheduler needs of a pod: its effective requests, the node requirements it brings (with the
//! relaxation order of controller-behaviour.md §1.4), and its tolerations.

use super::topology::{constraints, TopologyConstraint};
use super::volumes::AttachedVolume;
use crate::api::requirements::{Requirement, RequirementError, Requirements};
use crate::catalog::{CatalogError, Resources};
use k8s_openapi::api::core::v1::{Container, NodeSelectorTerm, Pod, PodSpec, Toleration};
use std::collections::BTreeMap;

/// A pod that cannot be simulated, with the reason.
#[derive(Debug, thiserror::Error)]
pub enum PodError {
    #[error("pod {pod}: {source}")]
    Resources {
        pod: String,
        #[source]
        source: CatalogError,
    },
    #[error("pod {pod}: {source}")]
    Requirements {
        pod: String,
        #[source]
        source: RequirementError,
    },
}

/// A pending pod as the scheduler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    /// `namespace/name`.
    pub key: String,
    pub uid: String,
    /// Creation time (RFC 3339 sorts as text), for the queue order.
    pub created: String,
    /// max(containers + sidecars, each init container + the sidecars before it) + overhead, plus one pod.
    pub requests: Resources,
    /// Requirement sets to try, strictest first: each required node-selector term with the preferred terms
    /// heaviest-first, then with fewer preferences (controller-behaviour.md §1.4 steps 1 and 4).
    pub variants: Vec<Requirements>,
    pub tolerations: Vec<Toleration>,
    /// How many of `variants` come from the required node-selector terms (relaxation step 1); the rest shed
    /// node-affinity preferences (step 4).
    pub required_terms: usize,
    /// The nodeSelector with each required node-selector term, no preferences: what topology spread measures
    /// skew over (Karpenter's strict pod requirements). Never empty.
    pub strict: Vec<Requirements>,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Spread constraints and pod (anti-)affinity.
    pub topology: Vec<TopologyConstraint>,
    /// The host ports the pod's containers bind.
    pub host_ports: Vec<HostPort>,
    /// Where its volumes let it go, as alternatives any one of which will do (a zonal volume's zone, ...): each
    /// node or claim is tried with each in turn; they narrow the node, never the pod's own requirements. Set from
    /// the cluster's claims by [`apply`](super::volumes::apply); empty when its volumes constrain nothing.
    pub volume_alternatives: Vec<Requirements>,
    /// The volumes it attaches against nodes' CSI attach limits; set from the cluster's claims by
    /// [`VolumeIndex::attached`](super::volumes::VolumeIndex::attached), empty until then.
    pub attached: Vec<AttachedVolume>,
}

/// A host port a container binds: no two pods on a node may bind the same one.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HostPort {
    pub protocol: String,
    /// The host IP; `0.0.0.0` (the default) binds every address.
    pub ip: String,
    pub port: i32,
}

impl HostPort {
    /// Whether two bindings collide: the same port and protocol on the same address, or on every address.
    pub fn clashes(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip == "0.0.0.0" || ip == "::";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// Whether any of `wanted` clashes with any of `taken`.
pub fn ports_clash(wanted: &[HostPort], taken: &[HostPort]) -> bool {
    wanted.iter().any(|w| taken.iter().any(|t| w.clashes(t)))
}

/// The host ports of every container and init container of `spec` (port 0 binds nothing).
fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let mut ports: Vec<HostPort> = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|port| *port > 0)?;
            Some(HostPort {
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".to_owned()),
                port,
            })
        })
        .collect();
    ports.sort();
    ports.dedup();
    ports
}

impl PodInfo {
    /// The strict requirements of requirement set `variant` (the required term it comes from).
    pub fn strict_of(&self, variant: usize) -> Option<&Requirements> {
        self.strict.get(variant).or(self.strict.last())
    }

    pub fn from_pod(pod: &Pod) -> Result<Self, PodError> {
        let meta = &pod.metadata;
        let key = format!(
            "{}/{}",
            meta.namespace.as_deref().unwrap_or("default"),
            meta.name.as_deref().unwrap_or_default()
        );
        let no_spec;
        let spec = match &pod.spec {
            Some(spec) => spec,
            None => {
                no_spec = PodSpec::default();
                &no_spec
            }
        };
        let requests = effective_requests(
            &spec.containers,
            spec.init_containers.as_deref().unwrap_or_default(),
            spec.overhead.as_ref(),
        )
        .map_err(|source| PodError::Resources {
            pod: key.clone(),
            source,
        })?;
        let (variants, strict) =
            requirement_variants(spec).map_err(|source| PodError::Requirements {
                pod: key.clone(),
                source,
            })?;
        let namespace = meta
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let labels = meta.labels.clone().unwrap_or_default();
        let topology = constraints(spec, &namespace, &labels, &strict);
        let required_terms = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map_or(1, |r| r.node_selector_terms.len().max(1))
            .min(variants.len());
        let host_ports = host_ports(spec);
        Ok(PodInfo {
            volume_alternatives: Vec::new(),
            attached: Vec::new(),
            host_ports,
            required_terms,
            strict,
            namespace,
            labels,
            topology,
            uid: meta.uid.clone().unwrap_or_else(|| key.clone()),
            created: meta
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default(),
            key,
            requests,
            variants,
            tolerations: spec.tolerations.clone().unwrap_or_default(),
        })
    }
}

/// A container's requests, defaulting to its limits as the apiserver does.
fn container_requests(container: &Container) -> Result<Resources, CatalogError> {
    let resources = container.resources.as_ref();
    let mut quantities: BTreeMap<&str, &str> = BTreeMap::new();
    for (name, q) in resources
        .and_then(|r| r.limits.as_ref())
        .into_iter()
        .flatten()
    {
        quantities.insert(name, &q.0);
    }
    for (name, q) in resources
        .and_then(|r| r.requests.as_ref())
        .into_iter()
        .flatten()
    {
        quantities.insert(name, &q.0);
    }
    Resources::from_quantities(quantities)
}

/// Kubernetes' effective pod requests, with sidecars (init containers that keep running).
fn effective_requests(
    containers: &[Container],
    init_containers: &[Container],
    overhead: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Result<Resources, CatalogError> {
    let mut running = Resources::default();
    for container in containers {
        running += &container_requests(container)?;
    }
    let mut sidecars = Resources::default();
    let mut init_peak = Resources::default();
    for init in init_containers {
        let requests = container_requests(init)?;
        if init.restart_policy.as_deref() == Some("Always") {
            sidecars += &requests;
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&(requests + &sidecars));
        }
    }
    let mut total = (running + &sidecars).max(&init_peak);
    if let Some(overhead) = overhead {
        total += &Resources::from_quantities(overhead.iter().map(|(k, v)| (k, &v.0)))?;
    }
    total.pods += 1;
    Ok(total)
}

/// The pod's requirement sets, strictest first, and its strict requirements ([`PodInfo::strict`]).
type Variants = (Vec<Requirements>, Vec<Requirements>);

/// The pod's requirement sets, strictest first, and its strict requirements ([`PodInfo::strict`]).
fn requirement_variants(spec: &PodSpec) -> Result<Variants, RequirementError> {
    let mut base = Requirements::new();
    for (key, value) in spec.node_selector.iter().flatten() {
        base.add(Requirement::one_of(key.clone(), [value.clone()]));
    }
    let node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    let required: Vec<&NodeSelectorTerm> = node_affinity
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|r| r.node_selector_terms.iter().collect())
        .unwrap_or_default();
    let mut preferred: Vec<(i32, &NodeSelectorTerm)> = node_affinity
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .map(|p| p.iter().map(|t| (t.weight, &t.preference)).collect())
        .unwrap_or_default();
    // Heaviest first; a stable sort keeps the written order among equal weights.
    preferred.sort_by_key(|(weight, _)| std::cmp::Reverse(*weight));
    let preferences = preferred
        .iter()
        .map(|(_, term)| term_requirements(term))
        .collect::<Result<Vec<_>, _>>()?;
    let terms = if required.is_empty() {
        vec![Requirements::new()]
    } else {
        required
            .iter()
            .map(|term| term_requirements(term))
            .collect::<Result<Vec<_>, _>>()?
    };
    let mut variants = Vec::new();
    let strict = terms.iter().map(|term| with_base(&base, term)).collect();
    let with = |term: &Requirements, preference: Option<&Requirements>| {
        let mut reqs = with_base(&base, term);
        if let Some(preference) = preference {
            reqs.add_all(preference);
        }
        reqs
    };
    // Step 1: each required term in turn, with the heaviest preference; step 4: then shed preferences.
    for term in &terms {
        variants.push(with(term, preferences.first()));
    }
    if let Some(last) = terms.last() {
        for preference in preferences.iter().skip(1) {
            variants.push(with(last, Some(preference)));
        }
        if !preferences.is_empty() {
            variants.push(with(last, None));
        }
    }
    Ok((variants, strict))
}

/// `base` (the nodeSelector) with `term` added.
fn with_base(base: &Requirements, term: &Requirements) -> Requirements {
    let mut reqs = base.clone();
    reqs.add_all(term);
    reqs
}

fn term_requirements(term: &NodeSelectorTerm) -> Result<Requirements, RequirementError> {
    Requirements::from_node_selector(term.match_expressions.as_deref().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(spec: serde_json::Value) -> PodInfo {
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}),
        )
        .expect("pod");
        PodInfo::from_pod(&pod).expect("pod info")
    }

    #[test]
    fn effective_requests_count_init_containers_sidecars_and_overhead() {
        let p = pod(json!({
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                           {"name": "b", "resources": {"limits": {"cpu": "250m"}}}],
            "initContainers": [{"name": "big-init", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}},
                               {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
            "overhead": {"cpu": "50m"}
        }));
        // max(containers 750m + sidecar 100m, init 2000m) + overhead 50m
        assert_eq!(p.requests.cpu, 2050);
        assert_eq!(p.requests.memory, 1 << 30);
        assert_eq!(p.requests.pods, 1);
        assert_eq!(p.key, "ns/p");
    }

    #[test]
    fn variants_follow_the_relaxation_order() {
        let p = pod(json!({
            "containers": [],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "affinity": {"nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]},
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                    {"weight": 50, "preference": {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}}]}}
        }));
        let shown: Vec<String> = p.variants.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 4, "{shown:#?}");
        assert!(
            shown[0].contains("arm64") && shown[0].contains("spot"),
            "{}",
            shown[0]
        );
        assert!(
            shown[1].contains("amd64") && shown[1].contains("spot"),
            "{}",
            shown[1]
        );
        assert!(
            shown[2].contains("amd64") && shown[2].contains("on-demand"),
            "{}",
            shown[2]
        );
        assert!(
            shown[3].contains("amd64") && !shown[3].contains("capacity-type"),
            "{}",
            shown[3]
        );
        assert!(shown.iter().all(|s| s.contains("linux")));
    }
}
