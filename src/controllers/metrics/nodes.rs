//! The node gauges Karpenter recomputes every 5 s from its cluster state (pkg/controllers/metrics/node):
//! allocatable, pod and DaemonSet requests and limits, system overhead and age of every Node, labelled with the
//! Node's well-known labels; the cluster's utilization; and the cluster-state gauges
//! (pkg/controllers/state/metrics.go). Computed here by pure functions of a snapshot of the stores.

use super::gauge_set::{GaugeSet, Labels, Samples};
use super::nodeclaims::seconds_between;
use super::resources::{list_values, resources_values};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::Resources;
use crate::disruption::is_daemonset_pod;
use crate::scheduling::PodInfo;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// The node gauges and the cluster-state gauges.
pub struct NodeMetrics {
    pub allocatable: GaugeSet,
    pub total_pod_requests: GaugeSet,
    pub total_pod_limits: GaugeSet,
    pub total_daemon_requests: GaugeSet,
    pub total_daemon_limits: GaugeSet,
    pub system_overhead: GaugeSet,
    pub current_lifetime: GaugeSet,
    /// `karpenter_cluster_utilization_percent{resource_type}`.
    pub utilization: GaugeSet,
    /// `karpenter_cluster_state_synced`.
    pub synced: Gauge,
    /// `karpenter_cluster_state_node_count`.
    pub node_count: Gauge,
    /// `karpenter_cluster_state_unsynced_time_seconds`.
    pub unsynced_seconds: Gauge<f64, AtomicU64>,
}

impl NodeMetrics {
    pub(super) fn register(registry: &mut Registry) -> NodeMetrics {
        let metrics = NodeMetrics {
            allocatable: GaugeSet::default(),
            total_pod_requests: GaugeSet::default(),
            total_pod_limits: GaugeSet::default(),
            total_daemon_requests: GaugeSet::default(),
            total_daemon_limits: GaugeSet::default(),
            system_overhead: GaugeSet::default(),
            current_lifetime: GaugeSet::default(),
            utilization: GaugeSet::default(),
            synced: Gauge::default(),
            node_count: Gauge::default(),
            unsynced_seconds: Gauge::default(),
        };
        let sets = [
            (
                "karpenter_nodes_allocatable",
                "What each Node can give pods, by resource",
                &metrics.allocatable,
            ),
            (
                "karpenter_nodes_total_pod_requests",
                "What the pods bound to each Node request, DaemonSet pods included",
                &metrics.total_pod_requests,
            ),
            (
                "karpenter_nodes_total_pod_limits",
                "The limits of the pods bound to each Node, DaemonSet pods included",
                &metrics.total_pod_limits,
            ),
            (
                "karpenter_nodes_total_daemon_requests",
                "What the DaemonSet pods bound to each Node request",
                &metrics.total_daemon_requests,
            ),
            (
                "karpenter_nodes_total_daemon_limits",
                "The limits of the DaemonSet pods bound to each Node",
                &metrics.total_daemon_limits,
            ),
            (
                "karpenter_nodes_system_overhead",
                "Each Node's capacity minus its allocatable: what the system keeps",
                &metrics.system_overhead,
            ),
            (
                "karpenter_nodes_current_lifetime_seconds",
                "Seconds since each Node was created",
                &metrics.current_lifetime,
            ),
            (
                "karpenter_cluster_utilization_percent",
                "Pod requests as a percentage of the Nodes' allocatable, by resource",
                &metrics.utilization,
            ),
        ];
        for (name, help, set) in sets {
            registry.register(name, help, set.clone());
        }
        registry.register(
            "karpenter_cluster_state_synced",
            "1 once every watched kind has its first list in kerf's cluster state",
            metrics.synced.clone(),
        );
        registry.register(
            "karpenter_cluster_state_node_count",
            "Nodes in kerf's cluster state: Nodes and launched NodeClaims, one per instance",
            metrics.node_count.clone(),
        );
        registry.register(
            "karpenter_cluster_state_unsynced_time_seconds",
            "Seconds the cluster state has not been synced",
            metrics.unsynced_seconds.clone(),
        );
        metrics
    }

    /// Publishes `samples`, replacing every previous node series.
    pub fn publish(&self, samples: NodeSamples) {
        self.allocatable.replace(samples.allocatable);
        self.total_pod_requests.replace(samples.pod_requests);
        self.total_pod_limits.replace(samples.pod_limits);
        self.total_daemon_requests.replace(samples.daemon_requests);
        self.total_daemon_limits.replace(samples.daemon_limits);
        self.system_overhead.replace(samples.system_overhead);
        self.current_lifetime.replace(samples.lifetime);
        self.utilization.replace(samples.utilization);
        self.node_count
            .set(i64::try_from(samples.node_count).unwrap_or(i64::MAX));
    }
}

/// The samples of one pass over the nodes.
#[derive(Debug, Default, PartialEq)]
pub struct NodeSamples {
    pub allocatable: Samples,
    pub pod_requests: Samples,
    pub pod_limits: Samples,
    pub daemon_requests: Samples,
    pub daemon_limits: Samples,
    pub system_overhead: Samples,
    pub lifetime: Samples,
    pub utilization: Samples,
    pub node_count: usize,
}

/// The metric label name of each well-known label key (the part after the `/`, lower-cased, `-` as `_`), as
/// Karpenter derives them from `v1.WellKnownLabels`; one key per name.
pub fn well_known_label_names() -> Vec<(String, String)> {
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for key in labels::well_known_labels() {
        if let Some((_, name)) = key.split_once('/') {
            names
                .entry(name.to_lowercase().replace('-', "_"))
                .or_insert(key);
        }
    }
    names.into_iter().map(|(name, key)| (key, name)).collect()
}

/// One pass over the stores at `now`.
pub fn node_samples(
    nodes: &[Arc<Node>],
    claims: &[Arc<NodeClaim>],
    pods: &[Arc<Pod>],
    now: Timestamp,
) -> NodeSamples {
    let managed: HashSet<&str> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.as_deref())
        .filter(|id| !id.is_empty())
        .collect();
    let mut bound: HashMap<&str, Vec<&Pod>> = HashMap::new();
    for pod in pods.iter().filter(|p| !is_terminal(p)) {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            bound.entry(node).or_default().push(pod);
        }
    }
    let well_known = well_known_label_names();
    let mut samples = NodeSamples {
        node_count: state_node_count(nodes, claims),
        ..NodeSamples::default()
    };
    let mut allocatable_total: BTreeMap<String, f64> = BTreeMap::new();
    let mut requested_total: BTreeMap<String, f64> = BTreeMap::new();
    for node in nodes {
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.as_deref());
        let base = node_labels(
            node,
            &well_known,
            provider_id.is_some_and(|id| managed.contains(id)),
        );
        let with = |resource: String| {
            let mut labels = base.clone();
            labels.push(("resource_type".to_owned(), resource));
            labels
        };
        let status = node.status.as_ref();
        let capacity = status.and_then(|s| s.capacity.as_ref());
        let allocatable = status.and_then(|s| s.allocatable.as_ref());
        let allocatable_values =
            list_values(allocatable.into_iter().flatten().map(|(k, q)| (k, &q.0)));
        let capacity_values = list_values(capacity.into_iter().flatten().map(|(k, q)| (k, &q.0)));
        let node_pods = bound.get(name).map(Vec::as_slice).unwrap_or_default();
        let daemons: Vec<&Pod> = node_pods
            .iter()
            .copied()
            .filter(|p| is_daemonset_pod(p))
            .collect();
        let requests = sum_requests(node_pods);
        for (resource, value) in &allocatable_values {
            *allocatable_total.entry(resource.clone()).or_default() += value;
        }
        for (resource, value) in &requests {
            *requested_total.entry(resource.clone()).or_default() += value;
        }
        let overhead: Vec<(String, f64)> = capacity_values
            .iter()
            .map(|(resource, value)| {
                let kept = allocatable_values
                    .iter()
                    .find(|(r, _)| r == resource)
                    .map_or(0.0, |(_, v)| *v);
                (resource.clone(), value - kept)
            })
            .collect();
        let sets: [(&mut Samples, Vec<(String, f64)>); 6] = [
            (&mut samples.allocatable, allocatable_values),
            (&mut samples.pod_requests, requests),
            (&mut samples.pod_limits, sum_limits(node_pods)),
            (&mut samples.daemon_requests, sum_requests(&daemons)),
            (&mut samples.daemon_limits, sum_limits(&daemons)),
            (&mut samples.system_overhead, overhead),
        ];
        for (set, values) in sets {
            set.extend(
                values
                    .into_iter()
                    .map(|(resource, value)| (with(resource), value)),
            );
        }
        if let Some(created) = &node.metadata.creation_timestamp {
            samples
                .lifetime
                .push((base, seconds_between(created.0, now)));
        }
    }
    samples.utilization = allocatable_total
        .into_iter()
        .filter(|(_, allocatable)| *allocatable != 0.0)
        .map(|(resource, allocatable)| {
            let used = requested_total.get(&resource).copied().unwrap_or(0.0);
            (
                vec![("resource_type".to_owned(), resource)],
                100.0 * used / allocatable,
            )
        })
        .collect();
    samples
}

/// A Node's labels as Karpenter's node gauges carry them: each well-known label (empty when the Node has
/// none), then `node_name`, `phase` and `managed` (whether a NodeClaim launched it).
fn node_labels(node: &Node, well_known: &[(String, String)], managed: bool) -> Labels {
    let node_labels = node.metadata.labels.as_ref();
    let mut labels: Labels = well_known
        .iter()
        .map(|(key, name)| {
            let value = node_labels
                .and_then(|l| l.get(key))
                .cloned()
                .unwrap_or_default();
            (name.clone(), value)
        })
        .collect();
    labels.push((
        "node_name".to_owned(),
        node.metadata.name.clone().unwrap_or_default(),
    ));
    labels.push((
        "phase".to_owned(),
        node.status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
    ));
    labels.push(("managed".to_owned(), managed.to_string()));
    labels
}

/// Karpenter's state nodes: one per provider ID of the launched claims and of the Nodes (a Node without one
/// counts by name, unless a NodePool owns it: such a Node waits for its provider ID).
pub fn state_node_count(nodes: &[Arc<Node>], claims: &[Arc<NodeClaim>]) -> usize {
    let mut keys: BTreeSet<String> = claims
        .iter()
        .filter_map(|c| c.status.as_ref()?.provider_id.clone())
        .filter(|id| !id.is_empty())
        .collect();
    for node in nodes {
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .filter(|id| !id.is_empty());
        let owned = node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get(labels::NODEPOOL).is_some_and(|p| !p.is_empty()));
        match provider_id {
            Some(id) => {
                keys.insert(id);
            }
            None if !owned => {
                keys.insert(node.metadata.name.clone().unwrap_or_default());
            }
            None => {}
        }
    }
    keys.len()
}

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The summed effective requests of `pods` (the scheduler's: init containers, sidecars and overhead counted)
/// and their number. A pod whose requests cannot be read is left out (logged).
fn sum_requests(pods: &[&Pod]) -> Vec<(String, f64)> {
    if pods.is_empty() {
        return Vec::new();
    }
    let mut total = Resources::default();
    for pod in pods {
        match PodInfo::from_pod(pod) {
            Ok(info) => total += &info.requests,
            Err(error) => tracing::debug!(%error, "pod left out of the node request metrics"),
        }
    }
    total.pods = i64::try_from(pods.len()).unwrap_or(i64::MAX);
    resources_values(&total)
}

/// The summed limits of `pods`, as the kubelet's `PodLimits` counts them (containers and sidecars added, the
/// largest init container as a floor, overhead on the resources that have a limit), and their number.
fn sum_limits(pods: &[&Pod]) -> Vec<(String, f64)> {
    if pods.is_empty() {
        return Vec::new();
    }
    let mut total = Resources::default();
    for pod in pods {
        match pod_limits(pod) {
            Ok(limits) => total += &limits,
            Err(error) => tracing::debug!(%error, "pod left out of the node limit metrics"),
        }
    }
    total.pods = i64::try_from(pods.len()).unwrap_or(i64::MAX);
    resources_values(&total)
}

fn container_limits(container: &Container) -> Result<Resources, crate::catalog::CatalogError> {
    Resources::from_quantities(
        container
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .into_iter()
            .flatten()
            .map(|(name, q)| (name, &q.0)),
    )
}

fn pod_limits(pod: &Pod) -> Result<Resources, crate::catalog::CatalogError> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(Resources::default());
    };
    let mut limits = Resources::default();
    for container in &spec.containers {
        limits += &container_limits(container)?;
    }
    let mut sidecars = Resources::default();
    let mut init_floor = Resources::default();
    for init in spec.init_containers.iter().flatten() {
        let own = container_limits(init)?;
        let during = if init.restart_policy.as_deref() == Some("Always") {
            limits += &own;
            sidecars += &own;
            sidecars.clone()
        } else {
            own + &sidecars
        };
        init_floor = init_floor.max(&during);
    }
    let mut limits = limits.max(&init_floor);
    for (name, quantity) in spec.overhead.iter().flatten() {
        let amount = Resources::from_quantities([(name, &quantity.0)])?.get(name);
        let limit = limits.get(name);
        if limit != 0 {
            limits.set(name, limit + amount);
        }
    }
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    fn node(name: &str, provider_id: &str, labels: serde_json::Value) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-11-23T10:00:00Z"},
                "spec": {"providerID": provider_id},
                "status": {
                    "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                    "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                },
            }))
            .expect("a Node"),
        )
    }

    fn pod(name: &str, node: &str, cpu: &str, owner: &str, phase: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default",
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner, "name": "o", "uid": "u"}]},
                "spec": {"nodeName": node, "containers": [{"name": "c",
                    "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": "1", "memory": "1Gi"}}}]},
                "status": {"phase": phase},
            }))
            .expect("a Pod"),
        )
    }

    fn claim(provider_id: &str) -> Arc<NodeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "c"},
                "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
                "status": {"providerID": provider_id},
            }))
            .expect("a NodeClaim"),
        )
    }

    fn value(samples: &[(Labels, f64)], node: &str, resource: &str) -> Option<f64> {
        samples
            .iter()
            .find(|(labels, _)| {
                labels.contains(&("node_name".to_owned(), node.to_owned()))
                    && labels.contains(&("resource_type".to_owned(), resource.to_owned()))
            })
            .map(|(_, v)| *v)
    }

    #[test]
    fn node_gauges_add_up_the_bound_pods_and_carry_the_well_known_labels() {
        let nodes = [
            node(
                "a",
                "aws:///z/i-a",
                json!({"karpenter.sh/nodepool": "general", "topology.kubernetes.io/zone": "us-west-2a"}),
            ),
            node("b", "aws:///z/i-b", json!({})),
        ];
        let pods = [
            pod("web", "a", "500m", "ReplicaSet", "Running"),
            pod("agent", "a", "100m", "DaemonSet", "Running"),
            pod("done", "a", "4", "ReplicaSet", "Succeeded"),
        ];
        let claims = [claim("aws:///z/i-a"), claim("aws:///z/i-launching")];
        let samples = node_samples(&nodes, &claims, &pods, at("2026-11-23T10:10:00Z"));
        assert_eq!(value(&samples.allocatable, "a", "cpu"), Some(1.93));
        assert_eq!(value(&samples.pod_requests, "a", "cpu"), Some(0.6));
        assert_eq!(value(&samples.pod_requests, "a", "pods"), Some(2.0));
        assert_eq!(value(&samples.daemon_requests, "a", "cpu"), Some(0.1));
        assert_eq!(
            value(&samples.pod_limits, "a", "memory"),
            Some(2.0 * 1_073_741_824.0)
        );
        assert_eq!(value(&samples.daemon_limits, "a", "cpu"), Some(1.0));
        assert_eq!(
            value(&samples.system_overhead, "a", "cpu"),
            Some(2.0 - 1.93)
        );
        assert_eq!(
            value(&samples.system_overhead, "a", "memory"),
            Some(1_073_741_824.0)
        );
        // A node without pods has no request series at all (Karpenter's empty list).
        assert_eq!(value(&samples.pod_requests, "b", "cpu"), None);
        let (labels, age) = &samples.lifetime[0];
        assert_eq!(*age, 600.0);
        for expected in [
            ("nodepool", "general"),
            ("zone", "us-west-2a"),
            ("instance_type", ""),
            ("capacity_type", ""),
            ("instance_category", ""),
            ("zone_id", ""),
            ("node_name", "a"),
            ("phase", ""),
            ("managed", "true"),
        ] {
            assert!(
                labels.contains(&(expected.0.to_owned(), expected.1.to_owned())),
                "{expected:?} not in {labels:?}"
            );
        }
        assert!(samples.lifetime[1]
            .0
            .contains(&("managed".to_owned(), "false".to_owned())));
        // 0.6 of 3.86 allocatable cores.
        let cpu = samples
            .utilization
            .iter()
            .find(|(l, _)| l[0].1 == "cpu")
            .map(|(_, v)| *v)
            .expect("cpu utilization");
        assert!((cpu - 100.0 * 0.6 / 3.86).abs() < 1e-9, "{cpu}");
        // Two Nodes and one claim still launching.
        assert_eq!(samples.node_count, 3);
    }

    #[test]
    fn limits_count_sidecars_init_floors_and_overhead_on_limited_resources() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": [{"name": "app", "resources": {"limits": {"cpu": "1"}}}],
                "initContainers": [
                    {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {"cpu": "500m"}}},
                    {"name": "setup", "resources": {"limits": {"cpu": "3", "memory": "1Gi"}}},
                ],
                "overhead": {"cpu": "100m", "memory": "64Mi"},
            },
        }))
        .expect("a Pod");
        let limits = pod_limits(&pod).expect("limits");
        // max(1 + 0.5, 3 + 0.5) + 0.1 overhead; memory from the init floor plus overhead.
        assert_eq!(limits.cpu, 3600);
        assert_eq!(limits.memory, 1_073_741_824 + 64 * 1_048_576);
    }

    #[test]
    fn well_known_labels_become_karpenters_label_names() {
        let names: Vec<String> = well_known_label_names()
            .into_iter()
            .map(|(_, n)| n)
            .collect();
        for expected in [
            "nodepool",
            "capacity_type",
            "zone",
            "region",
            "zone_id",
            "instance_type",
            "arch",
            "os",
            "windows_build",
            "instance_cpu_sustained_clock_speed_mhz",
            "placement_group_partition",
        ] {
            assert!(
                names.contains(&expected.to_owned()),
                "{expected} not in {names:?}"
            );
        }
        let unique: BTreeSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
    }
}
