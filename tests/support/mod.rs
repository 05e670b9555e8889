//! Helpers shared by the scheduling tests: a small synthetic catalog, NodePools and pods from JSON.
#![allow(dead_code)] // each test binary uses a different subset

use kerf::api::nodepool::NodePool;
use kerf::catalog::Catalog;
use kerf::scheduling::PodInfo;
pub use kerf_testkit::merge;
use kerf_testkit::{catalog_file, instance_type, offering};
use serde_json::{json, Value};

/// Three sizes of amd64 and one arm64 type; spot in two zones, on-demand in three; price grows with size.
pub fn catalog() -> Catalog {
    let offerings = |price: f64| {
        vec![
            offering("test-zone-a", "spot", price * 0.4),
            offering("test-zone-b", "spot", price * 0.5),
            offering("test-zone-a", "on-demand", price),
            offering("test-zone-b", "on-demand", price),
            offering("test-zone-c", "on-demand", price),
        ]
    };
    let it = |name: &str, cpu: &str, memory: &str, pods: u64, arch: &str, price: f64| {
        instance_type(name, cpu, memory, pods, arch, offerings(price))
    };
    let file = catalog_file(vec![
        it("small", "2", "4Gi", 10, "amd64", 0.1),
        it("medium", "4", "8Gi", 20, "amd64", 0.2),
        it("large", "16", "32Gi", 100, "amd64", 0.8),
        it("arm-medium", "4", "8Gi", 20, "arm64", 0.15),
    ]);
    Catalog::from_instance_types_json(&file).expect("catalog")
}

/// A NodePool `name` of amd64 nodes, `spec` merged into its spec.
pub fn nodepool(name: &str, spec: Value) -> NodePool {
    let mut base = json!({"template": {"spec": {"requirements": [
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}});
    merge(&mut base, spec);
    kerf_testkit::nodepool(name, base)
}

pub fn pods(n: usize, prefix: &str, spec: Value) -> Vec<PodInfo> {
    (0..n)
        .map(|i| {
            let mut pod = json!({"metadata": {"name": format!("{prefix}-{i}"), "namespace": "default", "uid": format!("{prefix}-{i}")},
                                 "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}});
            merge(&mut pod["spec"], spec.clone());
            PodInfo::from_pod(&serde_json::from_value(pod).expect("pod")).expect("pod info")
        })
        .collect()
}

/// `n` pods of 1 CPU and 1Gi with `labels`, `spec` merged in.
pub fn labelled(n: usize, prefix: &str, labels: Value, spec: Value) -> Vec<PodInfo> {
    (0..n)
        .map(|i| {
            let mut pod = json!({"metadata": {"name": format!("{prefix}-{i}"), "namespace": "default", "uid": format!("{prefix}-{i}"), "labels": labels},
                                 "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}});
            merge(&mut pod["spec"], spec.clone());
            PodInfo::from_pod(&serde_json::from_value(pod).expect("pod")).expect("pod info")
        })
        .collect()
}

/// What a plan costs per hour: each claim at its cheapest offering, every one priced.
pub fn plan_cost(plan: &kerf::scheduling::Plan) -> f64 {
    plan.claims
        .iter()
        .map(|c| c.cheapest.as_ref().and_then(|o| o.price).expect("priced"))
        .sum()
}

/// A required hostname anti-affinity to the pods labelled `app: group`.
pub fn hostname_anti_affinity(group: &str) -> Value {
    json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": group}}}]}}})
}
