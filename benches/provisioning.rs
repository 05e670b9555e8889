//! The controller's work between a batch window closing and the CreateFleet call, without the API calls: the
//! last window of the figures e2e test (docs/performance.md, "the controller's provisioning loop"). One
//! NodePool (amd64, on-demand) over the embedded us-east-1 catalog; 1,001 pending pods of 100m / 128Mi, of
//! which 800 are already on five claims in flight (solved in earlier windows of 200 pods, as the controller
//! solves them), so this window solves all 1,001 and makes one claim:
//! - `decide`: the provisioning decision ([`plan::decide`]), with the NodePools prepared by the decision before
//!   (as in the controller, batch after batch);
//! - `decide_unprepared`: the same, preparing the NodePools first (the first batch, or one after the catalog or
//!   a NodePool changed);
//! - `launch_request`: the new claim's launch request ([`LaunchRequest::from_node_claim`]).
//!
//! `cargo bench -p kerf --bench provisioning`; results in docs/performance.md.

use criterion::{criterion_group, criterion_main, Criterion};
use k8s_openapi::api::core::v1::Pod;
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodeclaim::NodeClaim;
use kerf::api::nodepool::NodePool;
use kerf::catalog::{Catalog, CatalogSettings, Pricing};
use kerf::cloud::{LaunchRequest, NodeClass, ResolvedNodeClass};
use kerf::engine::provisioning::plan::{self, Preparations, Snapshot};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const PODS: usize = 1_001;
const PER_WINDOW: usize = 200;

fn node_pool() -> NodePool {
    kerf_testkit::nodepool(
        "general",
        json!({"template": {"metadata": {"labels": {"team": "e2e"}}, "spec": {
            "requirements": [
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
            "expireAfter": "720h"}}}),
    )
}

fn node_class() -> EC2NodeClass {
    kerf_testkit::ec2nodeclass("default", json!({}))
}

/// An inflate pod the kube-scheduler marked unschedulable.
fn pending_pod(i: usize) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("inflate-{i}"), "namespace": "inflate", "uid": format!("uid-{i}"),
                         "labels": {"app": "inflate"}},
            "spec": {"containers": [{"name": "inflate", "image": "pause",
                                     "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": "2026-11-23T10:00:00Z"}]}}))
        .expect("pod"),
    )
}

/// The snapshot of the last window: the claims of the earlier windows in flight, every pod pending.
fn last_window(catalogs: &BTreeMap<String, Arc<Catalog>>) -> Snapshot {
    let mut snapshot = Snapshot {
        node_pools: vec![node_pool()],
        node_classes: vec![node_class()],
        ..Snapshot::default()
    };
    while snapshot.pods.len() + 2 * PER_WINDOW < PODS {
        let start = snapshot.pods.len();
        snapshot
            .pods
            .extend((start..start + PER_WINDOW).map(pending_pod));
        let claims = decide(&snapshot, catalogs, &mut Preparations::default()).claims;
        snapshot
            .node_claims
            .extend(claims.into_iter().map(|c| Arc::new(c.node_claim())));
    }
    let start = snapshot.pods.len();
    snapshot.pods.extend((start..PODS).map(pending_pod));
    snapshot
}

fn decide(
    snapshot: &Snapshot,
    catalogs: &BTreeMap<String, Arc<Catalog>>,
    preparations: &mut Preparations,
) -> plan::Decisions {
    let pods: Vec<&Pod> = snapshot.pods.iter().map(AsRef::as_ref).collect();
    plan::decide(snapshot, &pods, catalogs, preparations).expect("decision")
}

fn provisioning(c: &mut Criterion) {
    let catalog = Catalog::embedded("us-east-1", &CatalogSettings::default(), &Pricing::none())
        .expect("embedded catalog");
    let catalogs = BTreeMap::from([(String::from("default"), Arc::new(catalog))]);
    let snapshot = last_window(&catalogs);
    let mut kept = Preparations::default();
    let decisions = decide(&snapshot, &catalogs, &mut kept);
    let claim: NodeClaim = decisions
        .claims
        .first()
        .expect("the last window makes a claim")
        .node_claim()
        .clone();
    eprintln!(
        "{} claims in flight; this window: {} new claim(s), {} nominated, {} unschedulable",
        snapshot.node_claims.len(),
        decisions.claims.len(),
        decisions.nominated.len(),
        decisions.unschedulable.len()
    );
    let class = NodeClass {
        name: String::from("default"),
        spec: node_class().spec,
        resolved: ResolvedNodeClass::default(),
    };
    let types = &catalogs["default"].instance_types;
    let request = LaunchRequest::from_node_claim(&claim, class.clone(), types).expect("request");
    eprintln!(
        "launch request: {} instance types",
        request.instance_types.len()
    );

    let mut group = c.benchmark_group("provisioning");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(10))
        .warm_up_time(Duration::from_secs(1));
    group.bench_function("decide", |b| {
        b.iter(|| decide(&snapshot, &catalogs, &mut kept))
    });
    group.bench_function("decide_unprepared", |b| {
        b.iter(|| decide(&snapshot, &catalogs, &mut Preparations::default()))
    });
    group.bench_function("launch_request", |b| {
        b.iter(|| LaunchRequest::from_node_claim(&claim, class.clone(), types))
    });
    group.finish();
}

criterion_group!(benches, provisioning);
criterion_main!(benches);
