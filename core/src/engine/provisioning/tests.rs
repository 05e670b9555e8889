//! The provisioning decision over the embedded catalog: claims, in-flight claims counted, limits, pools that
//! cannot launch, and replacements for the pods of nodes being deleted.

use super::plan::{
    self, decide, Decisions, Preparations, Snapshot, ToSolve, LIMIT_REASON, NO_TYPES_REASON,
};
use crate::api::nodeclaim::NodeClaim;
use crate::api::nodepool::NodePool;
use crate::catalog::{Catalog, CatalogSettings, Pricing};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};

pub(super) fn catalog() -> Arc<Catalog> {
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

pub(super) fn pool(limits: serde_json::Value, requirements: serde_json::Value) -> NodePool {
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

pub(super) fn amd64() -> serde_json::Value {
    json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ])
}

pub(super) fn pending_pod(i: usize) -> Pod {
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
        node_claims: claims.into_iter().map(Arc::new).collect(),
        node_pools: pools,
        pods: (0..pods).map(|i| Arc::new(pending_pod(i))).collect(),
        ..Snapshot::default()
    }
}

fn run(snapshot: &Snapshot, catalogs: &BTreeMap<String, Arc<Catalog>>) -> Decisions {
    let pending: Vec<&Pod> = snapshot.pods.iter().map(AsRef::as_ref).collect();
    decide(snapshot, &pending, catalogs, &mut Preparations::default()).expect("a decision")
}

pub(super) fn default_catalogs() -> BTreeMap<String, Arc<Catalog>> {
    BTreeMap::from([("default".to_owned(), catalog())])
}

#[test]
fn pending_pods_become_claims_with_stable_names() {
    let snap = snapshot(vec![pool(json!(null), amd64())], Vec::new(), 10);
    let first = run(&snap, &default_catalogs());
    assert!(first.unschedulable.is_empty(), "{:?}", first.unschedulable);
    let placed: usize = first.claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(placed, 10);
    // Nothing holds them to a zone: all ten count as flexible.
    assert_eq!(
        first.effective_zones,
        BTreeMap::from([("flexible".to_owned(), 10)])
    );
    let again = run(&snap, &default_catalogs());
    let names = |d: &Decisions| -> Vec<Option<String>> {
        d.claims
            .iter()
            .map(|c| c.node_claim().metadata.name.clone())
            .collect()
    };
    assert_eq!(names(&first), names(&again));
    for claim in &first.claims {
        assert!(claim
            .node_claim()
            .metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("general-")));
    }
}

/// The claims a decision makes, as their requirements.
fn claim_requirements(decisions: &Decisions) -> Vec<serde_json::Value> {
    decisions
        .claims
        .iter()
        .map(|c| serde_json::to_value(&c.node_claim().spec.requirements).expect("requirements"))
        .collect()
}

#[test]
fn a_kept_preparation_decides_as_a_fresh_one_and_is_redone_when_its_inputs_change() {
    let pods: Vec<Pod> = (0..3).map(pending_pod).collect();
    let pending: Vec<&Pod> = pods.iter().collect();
    let mut kept = Preparations::default();
    let mut decide_kept = |pools: Vec<NodePool>, catalogs: &BTreeMap<String, Arc<Catalog>>| {
        let snapshot = snapshot(pools, vec![], 0);
        let decisions = decide(&snapshot, &pending, catalogs, &mut kept).expect("a decision");
        (decisions, kept.made())
    };
    let fresh = |pools: Vec<NodePool>, catalogs: &BTreeMap<String, Arc<Catalog>>| {
        let snapshot = snapshot(pools, vec![], 0);
        decide(&snapshot, &pending, catalogs, &mut Preparations::default()).expect("a decision")
    };
    let catalogs = default_catalogs();
    let (first, made) = decide_kept(vec![pool(json!(null), amd64())], &catalogs);
    assert_eq!(made, 1);
    let (again, made) = decide_kept(vec![pool(json!(null), amd64())], &catalogs);
    assert_eq!(made, 1, "the same pool and catalog are prepared once");
    assert_eq!(claim_requirements(&first), claim_requirements(&again));
    assert_eq!(
        claim_requirements(&again),
        claim_requirements(&fresh(vec![pool(json!(null), amd64())], &catalogs))
    );
    // The same pools listed in another order (as a watch cache may) are the same preparation.
    let named = |name: &str| {
        let mut p = pool(json!(null), amd64());
        p.metadata.name = Some(name.to_owned());
        p
    };
    assert_eq!(decide_kept(vec![named("a"), named("b")], &catalogs).1, 2);
    assert_eq!(decide_kept(vec![named("b"), named("a")], &catalogs).1, 2);

    // The pool now asks for arm64: the kept preparation (amd64 types only) must not be used.
    let arm64 = json!([{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]);
    let (changed, made) = decide_kept(vec![pool(json!(null), arm64.clone())], &catalogs);
    assert_eq!(made, 3);
    assert_eq!(
        claim_requirements(&changed),
        claim_requirements(&fresh(vec![pool(json!(null), arm64.clone())], &catalogs))
    );
    assert!(
        changed.claims[0]
            .node_claim()
            .spec
            .requirements
            .iter()
            .any(|r| r.key == "kubernetes.io/arch" && r.values == Some(vec!["arm64".into()])),
        "{:?}",
        claim_requirements(&changed)
    );

    // Another copy of the catalog, with one type only: prepared again over that copy.
    let one_type = Catalog {
        instance_types: catalog()
            .instance_types
            .iter()
            .filter(|it| it.name == "m6g.xlarge")
            .cloned()
            .collect(),
    };
    let small = BTreeMap::from([("default".to_owned(), Arc::new(one_type))]);
    let (recatalogued, made) = decide_kept(vec![pool(json!(null), arm64)], &small);
    assert_eq!(made, 4);
    let instance_types: Vec<Option<Vec<String>>> = recatalogued
        .claims
        .iter()
        .flat_map(|c| c.node_claim().spec.requirements)
        .filter(|r| r.key == "node.kubernetes.io/instance-type")
        .map(|r| r.values.clone())
        .collect();
    assert_eq!(instance_types, [Some(vec![String::from("m6g.xlarge")])]);
}

#[test]
fn claims_in_flight_take_their_pods_and_nothing_launches_twice() {
    let pools = vec![pool(json!(null), amd64())];
    let first = run(
        &snapshot(pools.clone(), Vec::new(), 10),
        &default_catalogs(),
    );
    let in_flight: Vec<NodeClaim> = first.claims.iter().map(|c| c.node_claim()).collect();
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
            c.node_claim()
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
    snap.pods[0] = Arc::new(serde_json::from_value(json!({
        "metadata": {"name": "big", "namespace": "default", "uid": "uid-big"},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "9"}}}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }))
    .expect("a valid pod"));
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

// --- Pods of nodes being deleted -------------------------------------------------------------------------

const NOW: &str = "2026-11-23T00:00:00Z";

pub(super) fn now() -> k8s_openapi::jiff::Timestamp {
    NOW.parse().expect("a timestamp")
}

/// A kerf Node of pool `general` with room for 4 of the test pods.
pub(super) fn node(name: &str) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "karpenter.sh/nodepool": "general", "karpenter.sh/initialized": "true",
            "kubernetes.io/arch": "amd64", "karpenter.sh/capacity-type": "on-demand",
            "node.kubernetes.io/instance-type": "m5.xlarge"}},
        "spec": {"providerID": format!("aws:///us-east-1a/i-{name}")},
        "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"}}
    }))
    .expect("a valid Node")
}

/// The launched claim of `node`.
pub(super) fn claim_of(node: &str, deleting: bool) -> NodeClaim {
    let mut claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": format!("{node}-claim"), "labels": {"karpenter.sh/nodepool": "general"}},
        "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]}],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
        "status": {"nodeName": node, "providerID": format!("aws:///us-east-1a/i-{node}"),
                   "capacity": {"cpu": "4", "memory": "16Gi", "pods": "58"}}
    });
    if deleting {
        claim["metadata"]["deletionTimestamp"] = json!(NOW);
        claim["metadata"]["finalizers"] = json!(["karpenter.sh/termination"]);
    }
    serde_json::from_value(claim).expect("a valid NodeClaim")
}

/// Inflate pod `i`, running on `node`.
pub(super) fn running_pod(i: usize, node: &str) -> Pod {
    let mut pod = pending_pod(i);
    pod.metadata.name = Some(format!("running-{i}"));
    pod.metadata.uid = Some(format!("running-uid-{i}"));
    pod.spec.as_mut().expect("a spec").node_name = Some(node.to_owned());
    pod.status = serde_json::from_value(json!({"phase": "Running", "conditions": [
        {"type": "PodScheduled", "status": "True"}
    ]}))
    .expect("a valid status");
    pod
}

/// Decides as the provisioning loop does: for the pending pods and those of nodes being deleted.
fn solve(snapshot: &Snapshot) -> Decisions {
    let leaving = snapshot.leaving();
    let to_solve = ToSolve::of(
        snapshot.pods.iter().map(AsRef::as_ref),
        &leaving,
        &[],
        now(),
    );
    let pods: Vec<&Pod> = to_solve.all().collect();
    decide(
        snapshot,
        &pods,
        &default_catalogs(),
        &mut Preparations::default(),
    )
    .expect("a decision")
}

/// Three pods on `old` (its claim deleting or not), three on a `kept` node (room for one more), and `claims`
/// beside the two nodes' claims.
fn draining(old_claim_deleting: bool, claims: Vec<NodeClaim>) -> Snapshot {
    let mut node_claims = vec![claim_of("old", old_claim_deleting), claim_of("kept", false)];
    node_claims.extend(claims);
    let mut pods: Vec<Arc<Pod>> = (0..3).map(|i| Arc::new(running_pod(i, "old"))).collect();
    pods.extend((3..6).map(|i| Arc::new(running_pod(i, "kept"))));
    Snapshot {
        nodes: vec![Arc::new(node("old")), Arc::new(node("kept"))],
        node_claims: node_claims.into_iter().map(Arc::new).collect(),
        node_pools: vec![pool(json!(null), amd64())],
        pods,
        ..Snapshot::default()
    }
}

fn pod_names(pods: &[&Pod]) -> Vec<String> {
    pods.iter().map(|p| plan::pod_key(p)).collect()
}

/// Karpenter's "should label nodes": a custom key the requirements leave open still labels the node (a pod
/// selecting it with `Exists` must fit there), with a value they allow; `DoesNotExist` and well-known keys do not.
#[test]
fn custom_requirement_keys_label_the_node() {
    let requirements = json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "team", "operator": "In", "values": ["b", "a"]},
        {"key": "tier", "operator": "NotIn", "values": ["0"]},
        {"key": "size", "operator": "Gt", "values": ["5"]},
        {"key": "any", "operator": "Exists"},
        {"key": "never", "operator": "DoesNotExist"},
        {"key": "node.kubernetes.io/windows-build", "operator": "NotIn", "values": ["x"]}
    ]);
    let decisions = run(
        &snapshot(vec![pool(json!(null), requirements)], Vec::new(), 1),
        &default_catalogs(),
    );
    let labels = decisions.claims[0]
        .node_claim()
        .metadata
        .labels
        .clone()
        .unwrap_or_default();
    let get = |k: &str| labels.get(k).map(String::as_str);
    assert_eq!(get("team"), Some("a"));
    assert_eq!(get("tier"), Some("1"));
    assert_eq!(get("size"), Some("6"));
    assert_eq!(get("any"), Some("0"));
    assert_eq!(get("never"), None);
    assert_eq!(get("node.kubernetes.io/windows-build"), None);
}

/// Karpenter's "should not schedule pods with nodePool which is not ready": a pool whose `Ready` condition is
/// not `True` launches nothing; one without the condition (not yet seen by the readiness controller) does.
#[test]
fn a_pool_that_is_not_ready_launches_nothing() {
    let mut not_ready = pool(json!(null), amd64());
    not_ready.status =
        serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "False",
        "reason": "UnhealthyDependents", "message": "NodeClassReady=False",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
        .expect("status");
    let decisions = run(
        &snapshot(vec![not_ready], Vec::new(), 2),
        &default_catalogs(),
    );
    assert!(decisions.claims.is_empty());
    assert!(decisions.unschedulable[0]
        .reason
        .contains("no ready NodePool"));
    let unknown = pool(json!(null), amd64());
    let decisions = run(&snapshot(vec![unknown], Vec::new(), 2), &default_catalogs());
    assert_eq!(decisions.claims.len(), 1);
}

/// Karpenter's "should not reschedule pods from a deleting node when pods are blocked due to fully blocking
/// PDBs": such a pod stays out of the batch; the others of the node are solved for.
#[test]
fn a_leaving_pod_that_pdbs_block_for_good_is_not_solved_for() {
    let snapshot = draining(true, Vec::new());
    let mut blocking: k8s_openapi::api::policy::v1::PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": "zero", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"blocked": "yes"}}}}))
        .expect("pdb");
    let mut pods: Vec<Pod> = snapshot.pods.iter().map(|p| (**p).clone()).collect();
    pods[0].metadata.labels = Some(BTreeMap::from([("blocked".into(), "yes".into())]));
    let leaving = snapshot.leaving();
    let to_solve = ToSolve::of(
        pods.iter(),
        &leaving,
        std::slice::from_ref(&blocking),
        now(),
    );
    assert_eq!(
        pod_names(&to_solve.reschedulable),
        ["default/running-1", "default/running-2"]
    );
    blocking
        .spec
        .get_or_insert_with(Default::default)
        .max_unavailable = Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1));
    let to_solve = ToSolve::of(
        pods.iter(),
        &leaving,
        std::slice::from_ref(&blocking),
        now(),
    );
    assert_eq!(to_solve.reschedulable.len(), 3);
}

#[test]
fn the_pods_of_a_node_whose_claim_is_deleting_are_solved_for_and_others_are_not() {
    let mut snapshot = draining(true, Vec::new());
    snapshot.pods.push(Arc::new(pending_pod(9)));
    let mut daemon = running_pod(8, "old");
    daemon.metadata.owner_references = serde_json::from_value(json!([
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d1"}
    ]))
    .expect("owner references");
    snapshot.pods.push(Arc::new(daemon));
    let leaving = snapshot.leaving();
    let to_solve = ToSolve::of(
        snapshot.pods.iter().map(AsRef::as_ref),
        &leaving,
        &[],
        now(),
    );
    assert_eq!(pod_names(&to_solve.pending), ["default/inflate-9"]);
    assert_eq!(
        pod_names(&to_solve.reschedulable),
        [
            "default/running-0",
            "default/running-1",
            "default/running-2"
        ]
    );
    assert_eq!(to_solve.all().count(), 4);

    let healthy = draining(false, Vec::new());
    let leaving = healthy.leaving();
    let to_solve = ToSolve::of(healthy.pods.iter().map(AsRef::as_ref), &leaving, &[], now());
    assert_eq!(to_solve.all().count(), 0);
}

#[test]
fn a_replacement_is_planned_for_the_pods_of_a_deleting_claim_and_its_node_is_no_capacity() {
    let decisions = solve(&draining(true, Vec::new()));
    // Pods still running on the deleting node are not pending: they are not counted by effective zone.
    assert!(
        decisions.effective_zones.is_empty(),
        "{:?}",
        decisions.effective_zones
    );
    assert!(
        decisions.unschedulable.is_empty(),
        "{:?}",
        decisions.unschedulable
    );
    let placed: Vec<&String> = decisions.claims.iter().flat_map(|c| &c.pods).collect();
    assert_eq!(placed.len() + decisions.nominated.len(), 3);
    for (pod, target) in &decisions.nominated {
        assert_eq!(
            target, "node/kept",
            "{pod} may only go where there is room that stays"
        );
    }
    assert_eq!(
        decisions.nominated.len(),
        1,
        "the kept node has room for one"
    );
    assert_eq!(placed.len(), 2);
}

#[test]
fn the_replacement_in_flight_absorbs_the_pods_on_the_next_pass_and_after_a_restart() {
    let first = solve(&draining(true, Vec::new()));
    let replacements: Vec<NodeClaim> = first.claims.iter().map(|c| c.node_claim()).collect();
    let names: BTreeSet<String> = replacements
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    // A restart solves the same snapshot from scratch: the same names, so creating them again is a 409.
    let again = solve(&draining(true, Vec::new()));
    let again_names: BTreeSet<String> = again
        .claims
        .iter()
        .filter_map(|c| c.node_claim().metadata.name.clone())
        .collect();
    assert_eq!(names, again_names);
    // The next pass sees them in flight: nothing new, every pod nominated.
    let second = solve(&draining(true, replacements));
    assert!(second.claims.is_empty(), "{:?}", second.claims);
    assert_eq!(second.nominated.len(), 3);
    for (_, target) in &second.nominated {
        let on_replacement = target
            .strip_prefix("nodeclaim/")
            .is_some_and(|n| names.contains(n));
        assert!(on_replacement || target == "node/kept", "{target}");
    }
}

#[test]
fn a_replacement_disruption_launched_takes_the_pods_and_no_second_one_launches() {
    let replacement: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "general-replacement", "labels": {"karpenter.sh/nodepool": "general"}},
        "spec": {"requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.2xlarge"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
                 "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}
    }))
    .expect("a valid NodeClaim");
    let decisions = solve(&draining(true, vec![replacement]));
    assert!(decisions.claims.is_empty(), "{:?}", decisions.claims);
    assert_eq!(decisions.nominated.len(), 3);
    assert!(decisions
        .nominated
        .iter()
        .all(|(_, target)| target == "nodeclaim/general-replacement" || target == "node/kept"));
}

#[test]
fn a_deleted_node_takes_its_claim_out_of_the_capacity_before_the_claim_is_deleted() {
    let mut snapshot = draining(false, Vec::new());
    Arc::make_mut(&mut snapshot.nodes[0])
        .metadata
        .deletion_timestamp = Some(serde_json::from_value(json!(NOW)).expect("a time"));
    let decisions = solve(&snapshot);
    assert!(decisions
        .nominated
        .iter()
        .all(|(_, target)| target != "nodeclaim/old-claim" && target != "node/old"));
    let solved =
        decisions.claims.iter().map(|c| c.pods.len()).sum::<usize>() + decisions.nominated.len();
    assert_eq!(solved, 3);
}

#[test]
fn the_replacement_is_not_named_like_the_claim_it_replaces() {
    let names = |d: &Decisions| -> BTreeSet<String> {
        d.claims
            .iter()
            .filter_map(|c| c.node_claim().metadata.name.clone())
            .collect()
    };
    // The pods were pending once, and got a claim named after their UIDs.
    let pending: Vec<Arc<Pod>> = (0..3)
        .map(|i| {
            let mut pod = running_pod(i, "old");
            pod.spec.as_mut().expect("a spec").node_name = None;
            pod.status = pending_pod(i).status;
            Arc::new(pod)
        })
        .collect();
    let first = solve(&Snapshot {
        node_pools: vec![pool(json!(null), amd64())],
        pods: pending,
        ..Snapshot::default()
    });
    let original = names(&first);
    assert!(!original.is_empty());
    // Now they run on that claim's node, and the claim is being deleted.
    let mut old_claim = claim_of("old", true);
    old_claim.metadata.name = original.iter().next().cloned();
    let replaced = solve(&Snapshot {
        nodes: vec![Arc::new(node("old"))],
        node_claims: vec![Arc::new(old_claim)],
        node_pools: vec![pool(json!(null), amd64())],
        pods: (0..3).map(|i| Arc::new(running_pod(i, "old"))).collect(),
        ..Snapshot::default()
    });
    let replacements = names(&replaced);
    assert_eq!(
        replaced.claims.iter().map(|c| c.pods.len()).sum::<usize>(),
        3
    );
    assert!(
        original.is_disjoint(&replacements),
        "{original:?} vs {replacements:?}"
    );
}

/// With two pools, the pool whose limit stopped a pod still gets its `NodePoolLimitReached` Event, whichever
/// place it has in the reason (the reason lists every pool).
#[test]
fn the_limit_warning_names_the_limited_pool_among_several() {
    let mut limited = pool(json!({"cpu": "4"}), amd64());
    limited.metadata.name = Some("zzz-limited".to_owned());
    let mut other = pool(json!(null), amd64());
    other.metadata.name = Some("aaa-arm".to_owned());
    // The second pool cannot take the pods at all: arm64 only, and they ask for amd64.
    other.spec.template.spec.requirements = serde_json::from_value(json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}
    ]))
    .expect("requirements");
    let mut snap = snapshot(vec![limited, other], Vec::new(), 10);
    for pod in &mut snap.pods {
        let mut p = (**pod).clone();
        p.spec.get_or_insert_with(Default::default).node_selector =
            Some([("kubernetes.io/arch".to_owned(), "amd64".to_owned())].into());
        *pod = Arc::new(p);
    }
    let decisions = run(&snap, &default_catalogs());
    assert!(!decisions.unschedulable.is_empty());
    assert!(
        decisions
            .pool_warnings
            .iter()
            .any(|w| w.reason == LIMIT_REASON && w.nodepool == "zzz-limited"),
        "{:?} / {:?}",
        decisions.pool_warnings,
        decisions.unschedulable.first()
    );
}

/// Pod `inflate-i` with a volume of claim `claim`.
fn pod_with_claim(i: usize, claim: &str) -> Pod {
    let mut pod = pending_pod(i);
    pod.spec.get_or_insert_with(Default::default).volumes = Some(vec![serde_json::from_value(
        json!({"name": "data", "persistentVolumeClaim": {"claimName": claim}}),
    )
    .expect("volume")]);
    pod
}

#[test]
fn a_pod_goes_where_its_volume_is_and_one_whose_claim_is_missing_waits_with_the_reason() {
    use crate::scheduling::volumes::VolumeIndex;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data", "namespace": "default",
                     "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "pv-1", "storageClassName": "gp3"}
    }))
    .expect("claim");
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": "pv-1"},
        "spec": {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east-1d"]}]}]}}}
    }))
    .expect("volume");
    let mut snap = snapshot(vec![pool(json!(null), amd64())], Vec::new(), 0);
    snap.pods = vec![
        Arc::new(pod_with_claim(0, "data")),
        Arc::new(pod_with_claim(1, "missing")),
    ];
    snap.volumes = VolumeIndex::from_objects([Arc::new(claim)], [Arc::new(volume)], []);
    let decisions = run(&snap, &default_catalogs());
    assert_eq!(decisions.claims.len(), 1);
    assert_eq!(decisions.claims[0].pods, ["default/inflate-0"]);
    assert_eq!(
        decisions.claims[0].choice.as_ref().map(|c| c.zone.as_str()),
        Some("us-east-1d")
    );
    let zone = serde_json::to_value(&decisions.claims[0].node_claim().spec.requirements)
        .expect("requirements");
    assert!(
        zone.as_array()
            .into_iter()
            .flatten()
            .any(|r| r["key"] == "topology.kubernetes.io/zone"
                && r["values"] == json!(["us-east-1d"])),
        "{zone}"
    );
    assert_eq!(decisions.unschedulable.len(), 1);
    assert_eq!(decisions.unschedulable[0].pod, "default/inflate-1");
    assert_eq!(
        decisions.unschedulable[0].reason,
        "getting persistent volume claim, persistentvolumeclaims \"missing\" not found"
    );
    // Refused before the solve: one of Karpenter's ignored pods.
    assert_eq!(decisions.ignored, 1);
}
