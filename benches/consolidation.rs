//! A full disruption pass (`kerf::disruption::decide`) over 2,000 nodes and 20,000 pods: the facts of every
//! node, the budgets, and the consolidation solves. The catalog is the embedded us-east-1 snapshot with a
//! synthetic price on every offering (on-demand: 4.8 cents a vCPU plus 0.6 cents a GiB; spot: 35 % of that),
//! the cluster 2,000 `m5.2xlarge` on-demand nodes over three zones, ten pods each, in one NodePool with the
//! default budget (10 %). Two shapes:
//! - `underutilized`: pods of 250–500m and 0.5–1 GiB (about 40 % of each node): multi-node consolidation finds
//!   a command among its 100 candidates;
//! - `packed`: pods of a tenth of a node's allocatable CPU and memory: no pod fits elsewhere and no cheaper type holds a node's
//!   pods, so every method runs to the end and finds nothing: the worst case of a pass.
//!
//! `cargo bench -p kerf --bench consolidation`; results and the machine are in docs/performance.md.
//! `KERF_DECIDE_ONCE=packed` (or `underutilized`) instead runs one pass, prints its time and outcome, and exits;
//! `KERF_NODES` then sets the number of nodes (ten pods each).

use criterion::{criterion_group, BenchmarkId, Criterion};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kerf::api::nodeclaim::NodeClaim;
use kerf::api::nodepool::NodePool;
use kerf::catalog::{CapacityType, Catalog, CatalogSettings, Pricing, Resources};
use kerf::disruption::{decide, Decision, DisruptionInput, NodeInput, Settings};
use kerf::scheduling::volumes::VolumeIndex;
use serde_json::json;
use std::time::Duration;

const NODES: usize = 2_000;

/// The cluster's size: [`NODES`], or `KERF_NODES` in the one-pass mode (the growth figure at 5,000 nodes).
fn nodes() -> usize {
    std::env::var("KERF_NODES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(NODES)
}
const PODS_PER_NODE: usize = 10;
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const T0: &str = "2026-11-23T00:00:00Z";
const NOW: &str = "2026-11-23T12:00:00Z";

fn catalog() -> Catalog {
    let mut catalog = Catalog::embedded("us-east-1", &CatalogSettings::default(), &Pricing::none())
        .expect("us-east-1 is embedded");
    for it in &mut catalog.instance_types {
        let vcpus = it.capacity.cpu as f64 / 1000.0;
        let gib = it.capacity.memory as f64 / f64::from(1u32 << 30);
        let on_demand = 0.048 * vcpus + 0.006 * gib;
        for o in &mut it.offerings {
            o.price = Some(match o.capacity_type {
                CapacityType::Spot => on_demand * 0.35,
                _ => on_demand,
            });
        }
    }
    catalog
}

fn nodepool() -> NodePool {
    kerf_testkit::nodepool(
        "default",
        json!({"template": {"spec": {"requirements": [
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}),
    )
}

/// The requests of pod `p` on a node with `allocatable`.
type Shape = fn(&Resources, usize) -> (String, String);

/// Node `i` with its claim and ten pods of `shape`.
fn node(catalog: &Catalog, i: usize, shape: Shape) -> NodeInput {
    let name = format!("node-{i}");
    let it = catalog.get("m5.2xlarge").expect("m5.2xlarge");
    let allocatable = it.allocatable();
    let resources = json!({"cpu": format!("{}m", allocatable.cpu), "memory": allocatable.memory.to_string(),
        "pods": allocatable.pods.to_string()});
    let labels = json!({"karpenter.sh/nodepool": "default", "karpenter.sh/initialized": "true",
        "node.kubernetes.io/instance-type": "m5.2xlarge", "topology.kubernetes.io/zone": ZONES[i % 3],
        "karpenter.sh/capacity-type": "on-demand", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name});
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "creationTimestamp": T0},
        "status": {"capacity": resources, "allocatable": resources, "conditions": [{"type": "Ready", "status": "True"}]}}))
    .expect("node");
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("claim-{i}"), "labels": labels, "creationTimestamp": T0},
        "spec": {"requirements": [], "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": {"nodeName": name, "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": T0, "reason": "Initialized", "message": ""}]}}))
    .expect("claim");
    let pods: Vec<Pod> = (0..PODS_PER_NODE)
        .map(|k| {
            let (cpu, memory) = shape(&allocatable, i * PODS_PER_NODE + k);
            let uid = format!("{name}-{k}");
            serde_json::from_value(json!({
                "metadata": {"name": uid, "namespace": "default", "uid": uid, "labels": {"app": format!("app-{}", k % 5)},
                             "creationTimestamp": T0},
                "spec": {"nodeName": name, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
                "status": {"phase": "Running", "startTime": T0}}))
            .expect("pod")
        })
        .collect();
    NodeInput::new(claim, Some(node), pods)
}

fn underutilized(_: &Resources, p: usize) -> (String, String) {
    let cpu = ["250m", "350m", "500m"][p % 3];
    let memory = ["512Mi", "768Mi", "1Gi"][(p / 3) % 3];
    (cpu.to_owned(), memory.to_owned())
}

/// A tenth of an `m5.2xlarge`'s allocatable CPU and memory: ten fill a node, no other node has room for one.
fn packed(allocatable: &Resources, _: usize) -> (String, String) {
    (
        format!("{}m", allocatable.cpu / 10),
        (allocatable.memory / 10).to_string(),
    )
}

struct Cluster {
    pools: Vec<NodePool>,
    nodes: Vec<NodeInput>,
    catalog: Catalog,
}

impl Cluster {
    fn new(shape: Shape) -> Self {
        let catalog = catalog();
        let nodes = (0..nodes()).map(|i| node(&catalog, i, shape)).collect();
        Cluster {
            pools: vec![nodepool()],
            nodes,
            catalog,
        }
    }

    fn decide(&self) -> Decision {
        let input = DisruptionInput {
            nodepools: &self.pools,
            nodes: &self.nodes,
            pending: &[],
            pdbs: &[],
            daemonsets: &[],
            catalog: &self.catalog,
            volumes: VolumeIndex::empty(),
            default_spread: kerf::scheduling::DefaultSpread::none(),
            settings: Settings::default(),
            prepared: None,
        };
        decide(&input, NOW.parse::<Timestamp>().expect("now"))
    }
}

fn shapes() -> [(&'static str, Shape); 2] {
    [("underutilized", underutilized), ("packed", packed)]
}

fn summary(decision: &Decision) -> String {
    match decision.commands.first() {
        Some(c) => format!(
            "{:?}: {} candidates, {} replacements, saves {:.2} USD/h",
            c.method,
            c.candidates.len(),
            c.replacements.len(),
            c.savings
        ),
        None => {
            let mut whys = std::collections::BTreeMap::new();
            for skip in &decision.skipped {
                *whys.entry(skip.why.to_string()).or_insert(0) += 1;
            }
            format!("no command; skips: {whys:?}")
        }
    }
}

fn consolidation(c: &mut Criterion) {
    let mut group = c.benchmark_group("consolidation");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .warm_up_time(Duration::from_secs(1));
    for (name, shape) in shapes() {
        let cluster = Cluster::new(shape);
        eprintln!("{name}: {}", summary(&cluster.decide()));
        group.bench_with_input(BenchmarkId::new(name, NODES), &cluster, |b, cluster| {
            b.iter(|| cluster.decide())
        });
    }
    group.finish();
}

criterion_group!(benches, consolidation);

fn main() {
    if let Ok(shape) = std::env::var("KERF_DECIDE_ONCE") {
        let (_, chosen) = shapes()
            .into_iter()
            .find(|(name, _)| *name == shape)
            .expect("KERF_DECIDE_ONCE is underutilized or packed");
        let cluster = Cluster::new(chosen);
        let started = std::time::Instant::now();
        let decision = cluster.decide();
        eprintln!(
            "{shape}: {:.3} s, {}",
            started.elapsed().as_secs_f64(),
            summary(&decision)
        );
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
