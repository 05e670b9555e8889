//! The provisioning decision over the embedded catalog: claims, in-flight claims counted, limits, pools that
//! cannot launch.

use super::plan::{decide, Decisions, Snapshot, LIMIT_REASON, NO_TYPES_REASON};
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::{Catalog, CatalogSettings, Pricing};
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

fn catalog() -> Arc<Catalog> {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    CATALOG
        .get_or_init(|| {
            let catalog =
                Catalog::embedded("us-east-1", &CatalogSettings::default(), &Pricing::none())
                    .expect("embedded catalog");
            Arc::new(catalog)
        })
        .clone()
}

fn pool(limits: serde_json::Value, requirements: serde_json::Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "general", "uid": "pool-uid"},
        "spec": {
            "limits": limits,
            "template": {"spec": {
                "requirements": requirements,
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }}
        }
    }))
    .expect("a valid NodePool")
}

fn amd64() -> serde_json::Value {
    json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ])
}

fn pending_pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("inflate-{i}"), "namespace": "default", "uid": format!("uid-{i}"),
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"containers": [{"name": "c", "image": "pause",
                 "resources": {"requests": {"cpu": "1", "memory": "1536Mi"}}}]},
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]}
    }))
    .expect("a valid pod")
}

fn snapshot(pools: Vec<NodePool>, claims: Vec<NodeClaim>, pods: usize) -> Snapshot {
    Snapshot {
        node_claims: claims,
        node_pools: pools,
        pods: (0..pods).map(pending_pod).collect(),
        ..Snapshot::default()
    }
}

fn run(snapshot: &Snapshot, catalogs: &BTreeMap<String, Arc<Catalog>>) -> Decisions {
    let pending: Vec<&Pod> = snapshot.pods.iter().collect();
    decide(snapshot, &pending, catalogs).expect("a decision")
}

fn default_catalogs() -> BTreeMap<String, Arc<Catalog>> {
    BTreeMap::from([("default".to_owned(), catalog())])
}

#[test]
fn pending_pods_become_claims_with_stable_names() {
    let snap = snapshot(vec![pool(json!(null), amd64())], Vec::new(), 10);
    let first = run(&snap, &default_catalogs());
    assert!(first.unschedulable.is_empty(), "{:?}", first.unschedulable);
    let placed: usize = first.claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 10);
    let again = run(&snap, &default_catalogs());
    let names = |d: &Decisions| -> Vec<Option<String>> {
        d.claims
            .iter()
            .map(|c| c.node_claim.metadata.name.clone())
            .collect()
    };
    assert_eq!(names(&first), names(&again));
    for claim in &first.claims {
        assert!(claim
            .node_claim
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("general-")));
    }
}

#[test]
fn claims_in_flight_take_their_pods_and_nothing_launches_twice() {
    let pools = vec![pool(json!(null), amd64())];
    let first = run(
        &snapshot(pools.clone(), Vec::new(), 10),
        &default_catalogs(),
    );
    let in_flight: Vec<NodeClaim> = first.claims.iter().map(|c| c.node_claim.clone()).collect();
    let second = run(&snapshot(pools, in_flight.clone(), 10), &default_catalogs());
    assert!(second.claims.is_empty(), "{:?}", second.claims);
    assert_eq!(second.nominated.len(), 10);
    for (_, target) in &second.nominated {
        assert!(target.starts_with("nodeclaim/general-"), "{target}");
    }
}

#[test]
fn limits_stop_new_claims_with_a_warning_naming_the_resource() {
    let snap = snapshot(vec![pool(json!({"cpu": "4"}), amd64())], Vec::new(), 10);
    let decisions = run(&snap, &default_catalogs());
    let cpu: i64 = decisions
        .claims
        .iter()
        .map(|c| {
            c.node_claim
                .spec
                .requirements
                .iter()
                .find(|r| r.key == "node.kubernetes.io/instance-type")
                .and_then(|r| r.values.as_ref())
                .and_then(|v| {
                    v.iter()
                        .map(|t| catalog().get(t).map(|it| it.capacity.cpu))
                        .max()
                })
                .flatten()
                .expect("planned types")
        })
        .sum();
    assert!(!decisions.claims.is_empty());
    assert!(cpu <= 4_000, "planned {cpu} millicores under a 4 CPU limit");
    assert!(!decisions.unschedulable.is_empty());
    let warning = decisions
        .pool_warnings
        .iter()
        .find(|w| w.reason == LIMIT_REASON)
        .expect("a limit warning");
    assert!(warning.message.contains("cpu"), "{}", warning.message);
    assert_eq!(warning.nodepool, "general");
}

#[test]
fn a_pool_already_over_its_limit_creates_nothing() {
    let launched: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "general-old", "labels": {"karpenter.sh/nodepool": "general"}},
        "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.2xlarge"]}],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "pods": "58"}}
    }))
    .expect("a valid NodeClaim");
    // A single pod that fits nowhere on the full claim (a 9-CPU pod).
    let mut snap = snapshot(vec![pool(json!({"cpu": "4"}), amd64())], vec![launched], 1);
    snap.pods[0] = serde_json::from_value(json!({
        "metadata": {"name": "big", "namespace": "default", "uid": "uid-big"},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "9"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("a valid pod");
    let decisions = run(&snap, &default_catalogs());
    assert!(decisions.claims.is_empty());
    assert_eq!(decisions.unschedulable.len(), 1);
    assert!(decisions
        .pool_warnings
        .iter()
        .any(|w| w.reason == LIMIT_REASON && w.message.contains("cpu")));
}

#[test]
fn a_pool_that_matches_no_type_is_reported() {
    let nothing = json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no.such"]}]);
    let decisions = run(
        &snapshot(vec![pool(json!(null), nothing)], Vec::new(), 1),
        &default_catalogs(),
    );
    assert!(decisions.claims.is_empty());
    assert_eq!(decisions.unschedulable.len(), 1);
    assert!(decisions
        .pool_warnings
        .iter()
        .any(|w| w.reason == NO_TYPES_REASON && w.nodepool == "general"));
}

#[test]
fn pods_wait_when_no_class_resolved() {
    let decisions = run(
        &snapshot(vec![pool(json!(null), amd64())], Vec::new(), 2),
        &BTreeMap::new(),
    );
    assert!(decisions.claims.is_empty());
    assert_eq!(decisions.unschedulable.len(), 2);
    assert!(decisions.unschedulable[0].reason.contains("EC2NodeClass"));
}

#[test]
fn pods_one_class_cannot_place_go_to_the_next() {
    let mut first: NodePool = pool(
        json!(null),
        json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["no.such"]}]),
    );
    first.metadata.name = Some("preferred".into());
    first.spec.weight = Some(50);
    first.spec.template.spec.node_class_ref.name = "other".into();
    let catalogs = BTreeMap::from([
        ("default".to_owned(), catalog()),
        ("other".to_owned(), catalog()),
    ]);
    let decisions = run(
        &snapshot(vec![first, pool(json!(null), amd64())], Vec::new(), 3),
        &catalogs,
    );
    assert!(
        decisions.unschedulable.is_empty(),
        "{:?}",
        decisions.unschedulable
    );
    assert!(decisions.claims.iter().all(|c| c.nodepool == "general"));
    assert_eq!(
        decisions.claims.iter().map(|c| c.pods.len()).sum::<usize>(),
        3
    );
    assert!(decisions
        .pool_warnings
        .iter()
        .any(|w| w.nodepool == "preferred" && w.reason == NO_TYPES_REASON));
}
