//! The scheduling simulation in a running cluster: existing nodes and in-flight NodeClaims with their pods,
//! DaemonSets, host ports and minValues (controller-behaviour.md §1.2–1.7).

mod support;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf::api::nodeclaim::NodeClaim;
use kerf::catalog::Catalog;
use kerf::scheduling::{solve, solve_cluster, Cluster, Plan};
use serde_json::{json, Value};
use support::{catalog, labelled, merge, nodepool};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOSTNAME: &str = "kubernetes.io/hostname";

/// An initialized kerf node of pool `default` in `zone` with `cpu` cores allocatable.
fn node(name: &str, zone: &str, cpu: &str) -> Node {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {ZONE: zone, "karpenter.sh/capacity-type": "on-demand",
            "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", "karpenter.sh/nodepool": "default",
            "karpenter.sh/initialized": "true", HOSTNAME: name}},
        "status": {"capacity": {"cpu": cpu, "memory": "32Gi", "pods": "110"},
                   "allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}}}))
    .expect("node")
}

/// A pod of 1 CPU and 1Gi bound to `node`, with `labels` and `spec` merged in.
fn bound(name: &str, node: &str, labels: Value, spec: Value) -> Pod {
    let mut pod = json!({"metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
        "status": {"phase": "Running"}});
    merge(&mut pod["spec"], spec);
    serde_json::from_value(pod).expect("pod")
}

fn daemonset(name: &str, cpu: &str, spec: Value) -> DaemonSet {
    let mut ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]}}}});
    merge(&mut ds["spec"]["template"]["spec"], spec);
    serde_json::from_value(ds).expect("daemonset")
}

fn cluster(
    nodes: &[Node],
    claims: &[NodeClaim],
    daemonsets: &[DaemonSet],
    pods: &[Pod],
) -> Cluster {
    Cluster::from_objects(nodes, claims, daemonsets, pods, &catalog()).expect("cluster")
}

fn run(pending: &[kerf::scheduling::PodInfo], cluster: &Cluster) -> Plan {
    solve_cluster(
        pending,
        &[nodepool("default", json!({}))],
        &catalog(),
        cluster,
    )
}

fn on_node<'a>(plan: &'a Plan, node: &str) -> Vec<&'a str> {
    plan.existing
        .iter()
        .filter(|n| n.node == node)
        .flat_map(|n| n.pods.iter().map(String::as_str))
        .collect()
}

fn claim_zone(claim: &kerf::scheduling::PlannedClaim) -> String {
    claim
        .requirements
        .get(ZONE)
        .and_then(|r| r.values())
        .filter(|v| v.len() == 1)
        .and_then(|v| v.first().cloned())
        .expect("claim narrowed to one zone")
}

fn plain(n: usize, prefix: &str) -> Vec<kerf::scheduling::PodInfo> {
    labelled(n, prefix, json!({"app": prefix}), json!({}))
}

#[test]
fn pods_fill_existing_nodes_before_new_claims() {
    let c = cluster(
        &[node("n1", "test-zone-a", "4")],
        &[],
        &[],
        &[bound("running", "n1", json!({}), json!({}))],
    );
    let plan = run(&plain(5, "web"), &c);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    // 4 CPUs, 1 taken: three pods fit; the other two need a claim.
    assert_eq!(on_node(&plan, "n1").len(), 3, "{plan:?}");
    let claimed: usize = plan.claims.iter().map(|c| c.pods.len()).sum();
    assert_eq!(claimed, 2);
}

#[test]
fn initialized_nodes_first_then_by_name_and_in_flight_claims_count_as_capacity() {
    let claim: NodeClaim = serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "a-in-flight", "labels": {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": "medium"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [{"key": ZONE, "operator": "In", "values": ["test-zone-b"]}]}}))
    .expect("nodeclaim");
    let c = cluster(
        &[node("c", "test-zone-a", "1"), node("b", "test-zone-a", "1")],
        std::slice::from_ref(&claim),
        &[],
        &[],
    );
    let plan = run(&plain(6, "web"), &c);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let order: Vec<(&str, usize)> = plan
        .existing
        .iter()
        .map(|n| (n.node.as_str(), n.pods.len()))
        .collect();
    // b and c hold one pod each; the in-flight medium (3.9 CPUs allocatable) takes three more.
    assert_eq!(order, [("b", 1), ("c", 1), ("a-in-flight", 3)]);
    assert_eq!(plan.claims.len(), 1);
}

#[test]
fn pods_on_existing_nodes_count_in_zonal_spread() {
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}}]});
    // Two matching pods already fill zone a's node.
    let c = cluster(
        &[node("n1", "test-zone-a", "2")],
        &[],
        &[],
        &[
            bound("old-0", "n1", json!({"app": "spread"}), json!({})),
            bound("old-1", "n1", json!({"app": "spread"}), json!({})),
        ],
    );
    let plan = run(&labelled(4, "s", json!({"app": "spread"}), spread), &c);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    let mut zones: Vec<String> = plan
        .claims
        .iter()
        .flat_map(|c| std::iter::repeat_n(claim_zone(c), c.pods.len()))
        .collect();
    zones.sort();
    assert_eq!(
        zones,
        ["test-zone-b", "test-zone-b", "test-zone-c", "test-zone-c"]
    );
}

#[test]
fn unmet_min_domains_caps_a_zone_that_already_holds_a_pod() {
    // minDomains 4 with three zones: the global minimum is 0, so each zone takes at most maxSkew = 1 pod.
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "minDomains": 4, "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}}]});
    let c = cluster(&[node("n1", "test-zone-a", "8")], &[], &[], &[]);
    let plan = run(&labelled(4, "s", json!({"app": "spread"}), spread), &c);
    assert_eq!(on_node(&plan, "n1").len(), 1, "{plan:?}");
    let mut zones: Vec<String> = plan.claims.iter().map(claim_zone).collect();
    zones.sort();
    assert_eq!(zones, ["test-zone-b", "test-zone-c"]);
    assert_eq!(plan.unschedulable.len(), 1);
    assert!(
        plan.unschedulable[0]
            .reason
            .contains("topology spread constraint on topology.kubernetes.io/zone"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn anti_affinity_against_pods_already_on_existing_nodes() {
    let c = cluster(
        &[node("n1", "test-zone-a", "8")],
        &[],
        &[],
        &[bound("db-0", "n1", json!({"app": "db"}), json!({}))],
    );
    let anti = |key: &str| {
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": key, "labelSelector": {"matchLabels": {"app": "db"}}}]}}})
    };
    let mut pending = labelled(1, "host-anti", json!({}), anti(HOSTNAME));
    pending.extend(labelled(1, "zone-anti", json!({}), anti(ZONE)));
    pending.extend(plain(1, "free"));
    let plan = run(&pending, &c);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(on_node(&plan, "n1"), ["default/free-0"]);
    for claim in &plan.claims {
        if claim
            .pods
            .iter()
            .any(|p| p.starts_with("default/zone-anti"))
        {
            let zones = claim.requirements.get(ZONE).expect("zone narrowed");
            assert!(
                !zones.has("test-zone-a") && zones.has("test-zone-b"),
                "{zones}"
            );
        }
    }
}

#[test]
fn running_pods_required_anti_affinity_keeps_matching_pods_away() {
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "web"}}}]}}});
    let c = cluster(
        &[node("n1", "test-zone-a", "8")],
        &[],
        &[],
        &[bound("loner", "n1", json!({"app": "loner"}), anti)],
    );
    let mut pending = plain(1, "web");
    pending.extend(plain(1, "other"));
    let plan = run(&pending, &c);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(on_node(&plan, "n1"), ["default/other-0"]);
    assert_eq!(plan.claims.len(), 1);
    assert_eq!(plan.claims[0].pods, ["default/web-0"]);
}

#[test]
fn preferred_node_affinity_wins_over_existing_capacity_until_relaxed() {
    let c = cluster(&[node("n1", "test-zone-a", "8")], &[], &[], &[]);
    let prefer = |zone: &str| {
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 10, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": [zone]}]}}]}}})
    };
    // Zone b is possible on a new claim, so the preference holds; zone "nowhere" is not, so it is relaxed and
    // the pod lands on the existing node.
    let mut pending = labelled(1, "prefers-b", json!({}), prefer("test-zone-b"));
    pending.extend(labelled(1, "prefers-nowhere", json!({}), prefer("nowhere")));
    let plan = run(&pending, &c);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(on_node(&plan, "n1"), ["default/prefers-nowhere-0"]);
    assert_eq!(plan.claims.len(), 1);
    assert_eq!(claim_zone(&plan.claims[0]), "test-zone-b");
}

#[test]
fn host_ports_clash_on_nodes_and_claims() {
    let port = |p: i32| {
        json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": p}],
        "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}}}]})
    };
    let c = cluster(
        &[node("n1", "test-zone-a", "8")],
        &[],
        &[],
        &[bound("taken", "n1", json!({}), port(8080))],
    );
    let mut pending = labelled(2, "clash", json!({}), port(8080));
    pending.extend(labelled(1, "free", json!({}), port(9090)));
    let plan = run(&pending, &c);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(on_node(&plan, "n1"), ["default/free-0"]);
    // The two pods binding 8080 cannot share a node either.
    assert_eq!(plan.claims.len(), 2, "{:?}", plan.claims);
}

#[test]
fn daemonset_overhead_makes_the_small_type_too_small() {
    let pending = plain(1, "web");
    let without = run(&pending, &Cluster::default());
    assert_eq!(without.claims[0].instance_types[0], "small");
    // 1 CPU for the agent leaves 0.9 CPU on a small: the pod needs a medium, and the claim asks for both.
    let agent = daemonset("agent", "1", json!({}));
    // An arm64-only DaemonSet and one that does not tolerate a taint it would need do not run on these nodes.
    let arm = daemonset(
        "arm-agent",
        "3",
        json!({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
    );
    let c = cluster(&[], &[], &[agent, arm], &[]);
    let with = run(&pending, &c);
    let claim = &with.claims[0];
    assert_eq!(*claim.instance_types, ["medium", "large"]);
    assert_eq!(claim.requests.cpu, 2000);

    let tainted = nodepool(
        "default",
        json!({"template": {"spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}}}),
    );
    let tolerating = labelled(
        1,
        "web",
        json!({}),
        json!({"tolerations": [{"key": "dedicated", "operator": "Exists"}]}),
    );
    let plan = solve_cluster(&tolerating, &[tainted], &catalog(), &c);
    assert_eq!(plan.claims[0].instance_types[0], "small", "{plan:?}");
}

#[test]
fn daemonsets_missing_from_an_existing_node_take_its_room() {
    let agent = daemonset("agent", "1", json!({}));
    let mut running = bound("agent-n2", "n2", json!({"app": "agent"}), json!({}));
    running.metadata.owner_references = Some(vec![serde_json::from_value(
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "1"}),
    )
    .expect("owner")]);
    running.metadata.namespace = Some("kube-system".to_owned());
    let c = cluster(
        &[
            node("n1", "test-zone-a", "2"),
            node("n2", "test-zone-a", "2"),
        ],
        &[],
        &[agent],
        &[running],
    );
    let plan = run(&plain(3, "web"), &c);
    // n1 keeps a CPU for the agent it will run; n2 already runs it: one pod each, the third on a claim.
    assert_eq!(on_node(&plan, "n1").len(), 1, "{plan:?}");
    assert_eq!(on_node(&plan, "n2").len(), 1, "{plan:?}");
    assert_eq!(plan.claims.len(), 1);
}

fn min_values_pool(min_values: i64) -> kerf::api::nodepool::NodePool {
    nodepool(
        "default",
        json!({"template": {"spec": {"requirements": [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "Exists", "minValues": min_values}]}}}),
    )
}

#[test]
fn min_values_keeps_enough_types_and_fails_strictly() {
    let small_pod = plain(1, "web");
    let plan = solve(&small_pod, &[min_values_pool(3)], &catalog());
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(*plan.claims[0].instance_types, ["small", "medium", "large"]);
    // A 2-CPU pod fits medium and large only: two instance types cannot meet minValues 3.
    let big_pod = labelled(
        1,
        "big",
        json!({}),
        json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]}),
    );
    let plan = solve(&big_pod, &[min_values_pool(3)], &catalog());
    assert!(plan.claims.is_empty());
    let reason = &plan.unschedulable[0].reason;
    assert!(
        reason.contains("minValues") && reason.contains("node.kubernetes.io/instance-type"),
        "{reason}"
    );
}

/// `count` one-CPU types of rising price.
fn many_types(count: usize) -> Catalog {
    let types: Vec<Value> = (0..count)
        .map(|i| json!({"name": format!("t-{i:04}"), "cpu": "4", "memory": "8Gi", "pods": 20, "arch": "amd64",
            "os": ["linux"], "labels": {}, "overhead": {"cpu": "100m", "memory": "100Mi"},
            "offerings": [{"zone": "test-zone-a", "capacityType": "on-demand", "price": 0.1 + i as f64 * 0.001, "available": true}]}))
        .collect();
    Catalog::from_instance_types_json(&json!({"instanceTypes": types}).to_string())
        .expect("catalog")
}

#[test]
fn truncation_to_600_types_must_not_break_min_values() {
    let catalog = many_types(700);
    let plan = solve(&plain(1, "web"), &[min_values_pool(600)], &catalog);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.claims[0].instance_types.len(), 600);
    let plan = solve(&plain(1, "web"), &[min_values_pool(601)], &catalog);
    assert!(plan.claims.is_empty());
    assert!(
        plan.unschedulable[0].reason.contains("601 cheapest")
            && plan.unschedulable[0].reason.contains("600"),
        "{}",
        plan.unschedulable[0].reason
    );
}

#[test]
fn unreadable_node_resources_are_a_clear_error() {
    let mut bad = node("n1", "test-zone-a", "4");
    if let Some(status) = bad.status.as_mut() {
        status.allocatable = Some(
            [(
                "cpu".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("four".to_owned()),
            )]
            .into(),
        );
    }
    let err = Cluster::from_objects::<_, kerf::api::nodeclaim::NodeClaim, Pod>(
        &[bad],
        &[],
        &[],
        &[],
        &catalog(),
    )
    .expect_err("bad quantity");
    let text = err.to_string();
    assert!(
        text.contains("Node n1") && text.contains("allocatable"),
        "{text}"
    );
}

/// Karpenter's topology suite, "should respect namespace selectors that match all namespaces": an empty
/// `namespaceSelector` (`{matchLabels: {}}` as much as `{}`) takes in pods of every namespace, not only the
/// pod's own.
#[test]
fn an_empty_namespace_selector_matches_every_namespace() {
    let mut other = bound("db-0", "n1", json!({"app": "db"}), json!({}));
    other.metadata.namespace = Some("data".to_owned());
    let c = cluster(&[node("n1", "test-zone-a", "8")], &[], &[], &[other]);
    for selector in [
        json!({}),
        json!({"matchLabels": {}}),
        json!({"matchExpressions": []}),
    ] {
        let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "db"}},
             "namespaceSelector": selector}]}}});
        let pending = labelled(1, "away", json!({}), anti);
        let plan = run(&pending, &c);
        assert!(
            on_node(&plan, "n1").is_empty(),
            "{selector}: placed next to db-0"
        );
        assert_eq!(plan.claims.len(), 1, "{selector}");
    }
    // Without a selector, only the pod's own namespace counts.
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": HOSTNAME, "labelSelector": {"matchLabels": {"app": "db"}}}]}}});
    let plan = run(&labelled(1, "near", json!({}), anti), &c);
    assert_eq!(on_node(&plan, "n1"), ["default/near-0"]);
}

/// Karpenter's provisioning suite, "should not launch a second node for pods that tolerate everything but the
/// startup and ephemeral taints of a node still initializing": until a kerf node is initialized, its
/// `not-ready`/`unreachable`/`uninitialized`/`unregistered` taints and its claim's startup taints are ignored,
/// so the pods wait for it; once initialized, any taint it still has counts.
#[test]
fn an_initializing_nodes_startup_and_ephemeral_taints_are_ignored() {
    let taints = json!([
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
        {"key": "readiness.k8s.io/cni", "effect": "NoSchedule"},
        {"key": "example.com/agent", "effect": "NoSchedule"}
    ]);
    let tainted = |initialized: bool| {
        let mut n = node("n1", "test-zone-a", "8");
        n.spec = Some(serde_json::from_value(json!({"taints": taints})).expect("spec"));
        if !initialized {
            n.metadata
                .labels
                .as_mut()
                .expect("labels")
                .remove("karpenter.sh/initialized");
        }
        n
    };
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                 "requirements": [],
                 "startupTaints": [{"key": "example.com/agent", "effect": "NoSchedule"}]},
        "status": {"nodeName": "n1"},
    }))
    .expect("claim");
    let initializing = cluster(&[tainted(false)], std::slice::from_ref(&claim), &[], &[]);
    let plan = run(&plain(2, "web"), &initializing);
    assert_eq!(on_node(&plan, "n1"), ["default/web-0", "default/web-1"]);
    assert!(plan.claims.is_empty(), "{:?}", plan.claims);

    let up = cluster(&[tainted(true)], &[claim], &[], &[]);
    let plan = run(&plain(2, "web"), &up);
    assert!(on_node(&plan, "n1").is_empty());
    assert_eq!(plan.claims.len(), 1);
}

/// Karpenter's provisioning suite, "should account for daemonset pods' resources as admitted, not as in the
/// template": the newest pod a DaemonSet runs (a LimitRange raised its requests to 2 CPU) sizes the overhead of
/// new nodes, not its template's 100m; without a pod, the template does.
#[test]
fn daemonset_overhead_comes_from_its_newest_pod() {
    let ds = daemonset("agent", "100m", json!({}));
    let running = |name: &str, cpu: &str, created: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "kube-system", "creationTimestamp": created,
                "labels": {"app": "agent"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent",
                    "uid": "ds-uid", "controller": true}]},
            "spec": {"nodeName": "elsewhere", "containers": [{"name": "c",
                "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": ["elsewhere"]}]}]}}}},
            "status": {"phase": "Running"},
        }))
        .expect("pod")
    };
    let requested = |pods: &[Pod]| {
        let c = cluster(&[], &[], std::slice::from_ref(&ds), pods);
        let plan = run(&plain(1, "web"), &c);
        assert_eq!(plan.claims.len(), 1, "{:?}", plan.unschedulable);
        plan.claims[0].requests.cpu
    };
    let template = requested(&[]);
    let admitted = requested(&[
        running("agent-old", "500m", "2026-11-01T00:00:00Z"),
        running("agent-new", "2", "2026-11-20T00:00:00Z"),
    ]);
    assert_eq!(
        admitted - template,
        1900,
        "overhead of the newest pod: 2 CPU instead of 100m"
    );
}
