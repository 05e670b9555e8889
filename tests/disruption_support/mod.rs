//! A small cluster for the disruption tests: NodePools, nodes with their claims and pods, a catalog of a few
//! families in four sizes, built from JSON so that each test states only what it is about.
#![allow(dead_code)] // each test binary uses a different subset

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kerf::api::nodeclaim::NodeClaim;
use kerf::api::nodepool::NodePool;
use kerf::catalog::Catalog;
use kerf::disruption::{decide, Decision, DisruptionInput, NodeInput, PassPreparation, Settings};
use kerf::scheduling::volumes::VolumeIndex;
use kerf_testkit::{catalog_file, instance_type, offering};
use serde_json::{json, Value};
use std::sync::Arc;

/// When nodes are created and initialized.
pub const T0: &str = "2026-11-23T00:00:00Z";
/// When the tests decide, unless they say otherwise.
pub const NOW: &str = "2026-11-23T12:00:00Z";
/// CPUs of the four sizes of each family.
pub const SIZES: [u32; 4] = [2, 4, 8, 16];

pub fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// On-demand USD per hour of family `f`, size `cpu`: 5 cents a CPU, 1 % more per family.
pub fn price(family: usize, cpu: u32) -> f64 {
    0.05 * f64::from(cpu) * (1.0 + 0.01 * family as f64)
}

/// `families` families `f0`..: types `f{k}-{cpu}` with 4 GiB a CPU, on-demand in zones a and b at [`price`],
/// spot at 40 % of it in both.
pub fn catalog(families: usize) -> Catalog {
    let types: Vec<Value> = (0..families)
        .flat_map(|f| SIZES.map(move |cpu| (f, cpu)))
        .map(|(f, cpu)| {
            let p = price(f, cpu);
            let offerings = vec![
                offering("zone-a", "on-demand", p),
                offering("zone-b", "on-demand", p),
                offering("zone-a", "spot", p * 0.4),
                offering("zone-b", "spot", p * 0.4),
            ];
            let (cpus, memory) = (cpu.to_string(), format!("{}Gi", 4 * cpu));
            instance_type(
                &format!("f{f}-{cpu}"),
                &cpus,
                &memory,
                110,
                "amd64",
                offerings,
            )
        })
        .collect();
    Catalog::from_instance_types_json(&catalog_file(types)).expect("catalog")
}

/// A NodePool `name` for on-demand amd64 nodes, with `disruption`.
pub fn pool(name: &str, disruption: Value) -> NodePool {
    pool_with(name, disruption, json!(["on-demand"]))
}

/// A NodePool `name` for the `capacity_types`, with `disruption`.
pub fn pool_with(name: &str, disruption: Value, capacity_types: Value) -> NodePool {
    kerf_testkit::nodepool(
        name,
        json!({"disruption": disruption, "template": {"spec": {"requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types}]}}}),
    )
}

/// The cluster a test decides on.
pub struct World {
    pub pools: Vec<NodePool>,
    pub nodes: Vec<NodeInput>,
    pub pending: Vec<Pod>,
    pub pdbs: Vec<PodDisruptionBudget>,
    pub catalog: Catalog,
    pub settings: Settings,
    /// The pods' claims, volumes and classes (none unless a test adds them).
    pub volumes: VolumeIndex,
}

impl World {
    pub fn new(pools: Vec<NodePool>, families: usize) -> Self {
        World {
            pools,
            nodes: Vec::new(),
            pending: Vec::new(),
            pdbs: Vec::new(),
            catalog: catalog(families),
            settings: Settings::default(),
            volumes: VolumeIndex::default(),
        }
    }

    pub fn input(&self) -> DisruptionInput<'_> {
        DisruptionInput {
            nodepools: &self.pools,
            nodes: &self.nodes,
            pending: &self.pending,
            pdbs: &self.pdbs,
            daemonsets: &[],
            catalog: &self.catalog,
            volumes: &self.volumes,
            default_spread: kerf::scheduling::DefaultSpread::none(),
            settings: self.settings,
            prepared: None,
        }
    }

    /// The pass at `now`. Every test that decides also checks that a preparation kept from pass to pass (as
    /// the controller and the simulator keep one), made anew or reused, decides alike.
    pub fn decide(&self, now: &str) -> Decision {
        let decision = decide(&self.input(), at(now));
        let shared = Arc::new(self.catalog.clone());
        let mut kept = PassPreparation::default();
        for _ in 0..2 {
            let mut input = self.input();
            input.catalog = &shared;
            input.prepared = Some(kept.get(&input, &shared));
            assert_eq!(
                decide(&input, at(now)),
                decision,
                "a kept preparation decides alike"
            );
        }
        assert_eq!(kept.made(), 1, "the second pass reuses the preparation");
        decision
    }

    /// Adds node `name` of `pool`, on `instance_type` (`f0-8`) bought as `capacity_type` in zone-a, created
    /// and initialized at [`T0`]; returns it for the test to adjust.
    pub fn node(
        &mut self,
        name: &str,
        pool: &str,
        instance_type: &str,
        capacity_type: &str,
    ) -> &mut NodeInput {
        let it = self.catalog.get(instance_type).expect("instance type");
        let labels = json!({"karpenter.sh/nodepool": pool, "karpenter.sh/initialized": "true",
            "node.kubernetes.io/instance-type": instance_type, "topology.kubernetes.io/zone": "zone-a",
            "karpenter.sh/capacity-type": capacity_type, "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name});
        let allocatable = it.allocatable();
        let resources = json!({"cpu": format!("{}m", allocatable.cpu), "memory": format!("{}", allocatable.memory),
            "pods": allocatable.pods.to_string()});
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "creationTimestamp": T0},
            "status": {"capacity": resources, "allocatable": resources,
                "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("node");
        let claim: NodeClaim = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": format!("{name}-claim"), "labels": labels, "creationTimestamp": T0},
            "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": {"nodeName": name, "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": T0, "reason": "Initialized", "message": ""}]},
        }))
        .expect("claim");
        self.nodes
            .push(NodeInput::new(claim, Some(node), Vec::new()));
        self.nodes.last_mut().expect("just pushed")
    }

    /// Binds `n` pods of `cpu` (e.g. `"1"`, `"500m"`) and 1Gi each to node `name`, with `metadata` merged in.
    pub fn pods(&mut self, name: &str, n: usize, cpu: &str, metadata: Value) {
        let node = self
            .nodes
            .iter_mut()
            .find(|n| n.node_name() == Some(name))
            .expect("node");
        let start = node.pods.len();
        node.pods.extend(
            (start..start + n)
                .map(|i| pod(&format!("{name}-p{i}"), Some(name), cpu, metadata.clone())),
        );
    }

    pub fn find(&mut self, name: &str) -> &mut NodeInput {
        self.nodes
            .iter_mut()
            .find(|n| n.node_name() == Some(name))
            .expect("node")
    }
}

/// A running pod `name` in namespace `shop` labelled `app: web`, requesting `cpu` and 1Gi, bound to `node`.
pub fn pod(name: &str, node: Option<&str>, cpu: &str, metadata: Value) -> Pod {
    let mut value = json!({
        "metadata": {"name": name, "namespace": "shop", "uid": name, "labels": {"app": "web"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
        "status": {"phase": if node.is_some() { "Running" } else { "Pending" }, "startTime": T0},
    });
    if let (Some(meta), Value::Object(extra)) = (value["metadata"].as_object_mut(), metadata) {
        meta.extend(extra);
    }
    serde_json::from_value(value).expect("pod")
}

/// The claim names of each command's candidates, in order.
pub fn disrupted(decision: &Decision) -> Vec<Vec<String>> {
    decision
        .commands
        .iter()
        .map(|c| c.candidates.iter().map(|t| t.claim.clone()).collect())
        .collect()
}
