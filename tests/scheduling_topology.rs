//! Topology spread and pod (anti-)affinity as Karpenter decides them, case by case: each case is a scenario of
//! Karpenter v1.14's `pkg/controllers/provisioning/scheduling/topology_test.go`, told in kerf's terms (the
//! upstream `It(...)` name is in `upstream`), with the counts per domain Karpenter expects (`ExpectSkew`).
//!
//! Karpenter's multi-step cases (provision, change the NodePool, provision again) start here from the cluster
//! the earlier steps leave: existing nodes with their pods.

use k8s_openapi::api::core::v1::{Node, Pod};
use kerf::api::nodepool::NodePool;
use kerf::catalog::Catalog;
use kerf::scheduling::{solve_cluster, Cluster, PodInfo};
use serde_json::{json, Value};
use std::collections::BTreeMap;

/// Karpenter's fake cloud provider in small: amd64 and arm64 types offered spot and on-demand in three zones.
fn catalog() -> Catalog {
    let offerings = |price: f64| {
        let mut all = Vec::new();
        for zone in ["test-zone-1", "test-zone-2", "test-zone-3"] {
            all.push(json!({"zone": zone, "capacityType": "spot", "price": price * 0.5, "available": true}));
            all.push(json!({"zone": zone, "capacityType": "on-demand", "price": price, "available": true}));
        }
        all
    };
    let it = |name: &str, cpu: &str, pods: i64, arch: &str, price: f64| {
        json!({"name": name, "cpu": cpu, "memory": "16Gi", "pods": pods, "arch": arch, "os": ["linux"],
               "labels": {}, "overhead": {"cpu": "0", "memory": "0"}, "offerings": offerings(price)})
    };
    let file = json!({"instanceTypes": [
        it("default-instance-type", "4", 110, "amd64", 0.4),
        it("arm-instance-type", "4", 110, "arm64", 0.35),
        it("large-instance-type", "16", 110, "amd64", 1.6),
        it("single-pod-instance-type", "4", 1, "amd64", 0.3),
    ]});
    Catalog::from_instance_types_json(&file.to_string()).expect("catalog")
}

/// A NodePool named `name` with `spec.template` merged over Karpenter's test pool (capacity type `Exists`).
fn pool(name: &str, template: Value) -> NodePool {
    let mut spec = json!({"template": {"spec": {
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]}}});
    merge(&mut spec["template"], template);
    serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name}, "spec": spec}))
    .expect("nodepool")
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

/// An existing node with `labels`, `taints` and `cpu` allocatable (a kubelet-registered, initialized node).
fn node(name: &str, labels: Value, taints: Value, cpu: &str) -> Node {
    let mut all = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"});
    merge(&mut all, labels);
    serde_json::from_value(json!({"metadata": {"name": name, "labels": all},
        "spec": {"taints": taints},
        "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}}}))
    .expect("node")
}

/// `n` pods named `prefix-i` with `labels`, a request of `cpu` and `spec` merged in.
fn pods(n: usize, prefix: &str, labels: Value, cpu: &str, spec: Value) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            let mut pod = json!({"metadata": {"name": format!("{prefix}-{i}"), "namespace": "default",
                    "uid": format!("{prefix}-{i}"), "labels": labels},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}});
            merge(&mut pod["spec"], spec.clone());
            serde_json::from_value(pod).expect("pod")
        })
        .collect()
}

/// `pods` bound to node `node`.
fn on(node: &str, mut pods: Vec<Pod>) -> Vec<Pod> {
    for pod in &mut pods {
        pod.spec.get_or_insert_with(Default::default).node_name = Some(node.to_owned());
    }
    pods
}

fn spread(key: &str, max_skew: i32, extra: Value) -> Value {
    let mut c = json!({"topologyKey": key, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": max_skew,
        "labelSelector": {"matchLabels": {"test": "test"}}});
    merge(&mut c, extra);
    json!({"topologySpreadConstraints": [c]})
}

const ZONE: &str = "topology.kubernetes.io/zone";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const ARCH: &str = "kubernetes.io/arch";

fn test_labels() -> Value {
    json!({"test": "test"})
}

fn zones(zones: &[&str]) -> Value {
    json!({"spec": {"requirements": [{"key": ZONE, "operator": "In", "values": zones}]}})
}

struct Case {
    upstream: &'static str,
    pools: Vec<NodePool>,
    nodes: Vec<Node>,
    /// Pods already running (bound to one of `nodes`).
    bound: Vec<Pod>,
    pending: Vec<Pod>,
    /// The key whose counts are checked, over the pods labelled `test: test`.
    key: &'static str,
    /// The counts per domain Karpenter expects, in any order.
    skew: Vec<usize>,
    /// How many pending pods stay unschedulable.
    unschedulable: usize,
}

/// Solves the case and counts the `test: test` pods per domain of its key (bound ones included).
fn run(case: &Case) -> (Vec<usize>, usize) {
    let catalog = catalog();
    let cluster = Cluster::from_objects(
        &case.nodes,
        &[] as &[kerf::api::nodeclaim::NodeClaim],
        &[],
        &case.bound,
        &catalog,
    )
    .expect("cluster");
    let infos: Vec<PodInfo> = case
        .pending
        .iter()
        .map(|p| PodInfo::from_pod(p).expect("pod"))
        .collect();
    let plan = solve_cluster(&infos, &case.pools, &catalog, &cluster);
    let counted: BTreeMap<String, bool> = case
        .pending
        .iter()
        .chain(&case.bound)
        .map(|p| {
            let name = format!("default/{}", p.metadata.name.as_deref().unwrap_or_default());
            let labels = p.metadata.labels.clone().unwrap_or_default();
            (name, labels.get("test").is_some_and(|v| v == "test"))
        })
        .collect();
    let mut per_domain: BTreeMap<String, usize> = BTreeMap::new();
    let node_domain = |name: &str| {
        let node = case
            .nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .expect("node");
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(case.key))
            .cloned()
    };
    for pod in &case.bound {
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or_default();
        if counted[&format!(
            "default/{}",
            pod.metadata.name.as_deref().unwrap_or_default()
        )] {
            if let Some(domain) = node_domain(node) {
                *per_domain.entry(domain).or_default() += 1;
            }
        }
    }
    for placement in &plan.existing {
        if let Some(domain) = node_domain(&placement.node) {
            *per_domain.entry(domain).or_default() +=
                placement.pods.iter().filter(|p| counted[*p]).count();
        }
    }
    for (i, claim) in plan.claims.iter().enumerate() {
        let domain = if case.key == "kubernetes.io/hostname" {
            format!("claim-{i}")
        } else {
            let values = claim.requirements.get(case.key).and_then(|r| r.values());
            match values.filter(|v| v.len() == 1).and_then(|v| v.first()) {
                Some(v) => v.clone(),
                // The types of the claim decide: count the claim apart from every domain.
                None => format!("undecided-{i}"),
            }
        };
        *per_domain.entry(domain).or_default() += claim.pods.iter().filter(|p| counted[*p]).count();
    }
    let mut skew: Vec<usize> = per_domain.into_values().filter(|n| *n > 0).collect();
    skew.sort_unstable();
    (skew, plan.unschedulable.len())
}

/// Karpenter's NodeTaintsPolicy case: a pool whose nodes get `fake-label: baz`, two full nodes in the domains
/// `foo` and `bar` with a taint the pods do not tolerate, five 1-CPU pods spread over the label with `policy`.
fn tainted_nodes(
    upstream: &'static str,
    policy: &str,
    skew: Vec<usize>,
    unschedulable: usize,
) -> Case {
    let taint = json!([{"key": "taintname", "value": "taintvalue", "effect": "NoSchedule"}]);
    Case {
        upstream,
        pools: vec![pool(
            "default",
            json!({"metadata": {"labels": {"fake-label": "baz"}}}),
        )],
        nodes: vec![
            node("foo", json!({"fake-label": "foo"}), taint.clone(), "100m"),
            node("bar", json!({"fake-label": "bar"}), taint, "100m"),
        ],
        bound: vec![],
        pending: pods(
            5,
            "p",
            test_labels(),
            "1",
            spread("fake-label", 1, json!({"nodeTaintsPolicy": policy})),
        ),
        key: "fake-label",
        skew,
        unschedulable,
    }
}

/// Karpenter's NodeTaintsPolicy case with the domains from NodePools: `foo` from an untainted pool, `bar` from a
/// pool tainted against the pods; two pods spread over the label with `policy`.
fn tainted_pool(
    upstream: &'static str,
    policy: &str,
    skew: Vec<usize>,
    unschedulable: usize,
) -> Case {
    let requirements = |value: &str| json!([{"key": CAPACITY_TYPE, "operator": "Exists"}, {"key": "fake-label", "operator": "In", "values": [value]}]);
    Case {
        upstream,
        pools: vec![
            pool(
                "default",
                json!({"spec": {"requirements": requirements("foo")}}),
            ),
            pool(
                "tainted",
                json!({"spec": {"taints": [{"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}],
                    "requirements": requirements("bar")}}),
            ),
        ],
        nodes: vec![],
        bound: vec![],
        pending: pods(
            2,
            "p",
            test_labels(),
            "100m",
            spread("fake-label", 1, json!({"nodeTaintsPolicy": policy})),
        ),
        key: "fake-label",
        skew,
        unschedulable,
    }
}

/// Karpenter's NodeAffinityPolicy case: a pool whose nodes get `fake-label: baz` and `selector: value`, two full
/// nodes in `foo` and `bar` whose `selector` the pods' nodeSelector does not match; five 1-CPU pods spread over
/// the label with `policy`.
fn mismatched_nodes(
    upstream: &'static str,
    policy: &str,
    skew: Vec<usize>,
    unschedulable: usize,
) -> Case {
    let mut spec = spread("fake-label", 1, json!({"nodeAffinityPolicy": policy}));
    spec["nodeSelector"] = json!({"selector": "value"});
    Case {
        upstream,
        pools: vec![pool(
            "default",
            json!({"metadata": {"labels": {"fake-label": "baz", "selector": "value"}}}),
        )],
        nodes: vec![
            node(
                "foo",
                json!({"fake-label": "foo", "selector": "mismatch"}),
                json!([]),
                "100m",
            ),
            node(
                "bar",
                json!({"fake-label": "bar", "selector": "mismatch"}),
                json!([]),
                "100m",
            ),
        ],
        bound: vec![],
        pending: pods(5, "p", test_labels(), "1", spec),
        key: "fake-label",
        skew,
        unschedulable,
    }
}

fn cases() -> Vec<Case> {
    let default_pool = || vec![pool("default", json!({}))];
    let rr = "1100m";
    vec![
        Case {
            upstream: "Zonal: should balance pods across zones (match labels)",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: pods(4, "p", test_labels(), "100m", spread(ZONE, 1, json!({}))),
            key: ZONE,
            skew: vec![1, 1, 2],
            unschedulable: 0,
        },
        Case {
            upstream: "Zonal: should respect NodePool zonal constraints",
            pools: vec![pool("default", zones(&["test-zone-1", "test-zone-2"]))],
            nodes: vec![],
            bound: vec![],
            pending: pods(4, "p", test_labels(), "100m", spread(ZONE, 1, json!({}))),
            key: ZONE,
            skew: vec![2, 2],
            unschedulable: 0,
        },
        Case {
            upstream: "Zonal: should respect NodePool zonal constraints (subset) with labels across NodePools",
            pools: vec![
                pool(
                    "default",
                    json!({"metadata": {"labels": {ZONE: "test-zone-1"}},
                           "spec": {"requirements": [{"key": ZONE, "operator": "In", "values": ["test-zone-1", "test-zone-2"]}]}}),
                ),
                pool("second", json!({"metadata": {"labels": {ZONE: "test-zone-2"}}})),
            ],
            nodes: vec![],
            bound: vec![],
            pending: pods(4, "p", test_labels(), "100m", spread(ZONE, 1, json!({}))),
            key: ZONE,
            skew: vec![2, 2],
            unschedulable: 0,
        },
        Case {
            upstream: "Zonal: should respect NodePool zonal constraints (existing pod)",
            pools: vec![pool("default", zones(&["test-zone-1", "test-zone-2"]))],
            // Full: Karpenter sizes the requests so that the node cannot take more.
            nodes: vec![node("zone-3-node", json!({ZONE: "test-zone-3"}), json!([]), "1200m")],
            bound: on("zone-3-node", pods(1, "existing", test_labels(), rr, json!({}))),
            pending: pods(6, "p", test_labels(), rr, spread(ZONE, 1, json!({}))),
            key: ZONE,
            // The existing pod's zone counts though the pool cannot launch there: two per other zone at most.
            skew: vec![1, 2, 2],
            unschedulable: 2,
        },
        Case {
            upstream: "Zonal: should schedule to the non-minimum domain if its all that's available",
            pools: vec![pool("default", zones(&["test-zone-3"]))],
            nodes: vec![
                node("z1", json!({ZONE: "test-zone-1"}), json!([]), "1200m"),
                node("z2", json!({ZONE: "test-zone-2"}), json!([]), "1200m"),
            ],
            bound: [
                on("z1", pods(1, "a", test_labels(), rr, spread(ZONE, 5, json!({})))),
                on("z2", pods(1, "b", test_labels(), rr, spread(ZONE, 5, json!({})))),
            ]
            .concat(),
            pending: pods(10, "p", test_labels(), rr, spread(ZONE, 5, json!({}))),
            key: ZONE,
            skew: vec![1, 1, 6],
            unschedulable: 4,
        },
        Case {
            upstream: "Zonal: should not violate max-skew when unsat = do not schedule",
            pools: vec![pool("default", zones(&["test-zone-2", "test-zone-3"]))],
            nodes: vec![node("z1", json!({ZONE: "test-zone-1"}), json!([]), "1200m")],
            bound: on("z1", pods(1, "a", test_labels(), rr, spread(ZONE, 1, json!({})))),
            pending: pods(10, "p", test_labels(), rr, spread(ZONE, 1, json!({}))),
            key: ZONE,
            skew: vec![1, 2, 2],
            unschedulable: 6,
        },
        Case {
            upstream: "Zonal: should not violate max-skew when unsat = do not schedule (discover domains)",
            pools: vec![pool("default", zones(&["test-zone-2", "test-zone-3"]))],
            nodes: vec![node("z1", json!({ZONE: "test-zone-1"}), json!([]), "1200m")],
            // The running pod has no spread of its own: its zone is still a domain, and it counts there.
            bound: on("z1", pods(1, "a", test_labels(), rr, json!({}))),
            pending: pods(10, "p", test_labels(), rr, spread(ZONE, 1, json!({}))),
            key: ZONE,
            skew: vec![1, 2, 2],
            unschedulable: 6,
        },
        Case {
            upstream: "Combined Zonal Topology and Node Affinity: should limit spread options by nodeSelector",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: [
                pods(5, "one", test_labels(), "100m", {
                    let mut s = spread(ZONE, 1, json!({}));
                    s["nodeSelector"] = json!({ZONE: "test-zone-1"});
                    s
                }),
                pods(10, "two", test_labels(), "100m", {
                    let mut s = spread(ZONE, 1, json!({}));
                    s["nodeSelector"] = json!({ZONE: "test-zone-2"});
                    s
                }),
            ]
            .concat(),
            key: ZONE,
            skew: vec![5, 10],
            unschedulable: 0,
        },
        Case {
            upstream: "Combined Zonal Topology and Node Affinity: should limit spread options by node requirements",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: pods(10, "p", test_labels(), "100m", {
                let mut s = spread(ZONE, 1, json!({}));
                s["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1", "test-zone-2"]}]}]}}});
                s
            }),
            key: ZONE,
            skew: vec![5, 5],
            unschedulable: 0,
        },
        Case {
            upstream: "Combined Zonal Topology and Node Affinity: should limit spread options by required node affinity (second step)",
            pools: vec![pool("default", zones(&["test-zone-1", "test-zone-2", "test-zone-3"]))],
            nodes: vec![
                node("z1", json!({ZONE: "test-zone-1"}), json!([]), "4"),
                node("z2", json!({ZONE: "test-zone-2"}), json!([]), "4"),
            ],
            bound: [
                on("z1", pods(3, "a", test_labels(), "1", json!({}))),
                on("z2", pods(3, "b", test_labels(), "1", json!({}))),
            ]
            .concat(),
            pending: pods(1, "p", test_labels(), "100m", {
                let mut s = spread(ZONE, 1, json!({}));
                s["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-2", "test-zone-3"]}]}]}}});
                s
            }),
            key: ZONE,
            // The empty zone-3 takes it: it lowers the skew though the skew is already violated.
            skew: vec![1, 3, 3],
            unschedulable: 0,
        },
        Case {
            upstream: "Combined Zonal Topology and Node Affinity: should not limit spread options by preferred node affinity",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: pods(6, "p", test_labels(), "100m", {
                let mut s = spread(ZONE, 1, json!({}));
                s["affinity"] = json!({"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1", "test-zone-2"]}]}}]}});
                s
            }),
            key: ZONE,
            skew: vec![2, 2, 2],
            unschedulable: 0,
        },
        Case {
            upstream: "Topology: should ignore unknown topology keys",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: [
                pods(1, "unknown", test_labels(), "100m", spread("unknown", 1, json!({}))),
                pods(1, "plain", json!({}), "100m", json!({})),
            ]
            .concat(),
            key: ZONE,
            // The spread pod waits (no domain of `unknown` exists), the plain one is placed.
            skew: vec![],
            unschedulable: 1,
        },
        Case {
            upstream: "CapacityType: should balance pods across capacity types",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: pods(4, "p", test_labels(), "100m", spread(CAPACITY_TYPE, 1, json!({}))),
            key: CAPACITY_TYPE,
            skew: vec![2, 2],
            unschedulable: 0,
        },
        Case {
            upstream: "CapacityType: should respect NodePool capacity type constraints",
            pools: vec![pool(
                "default",
                json!({"spec": {"requirements": [{"key": CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}]}}),
            )],
            nodes: vec![],
            bound: vec![],
            pending: pods(4, "p", test_labels(), "100m", spread(CAPACITY_TYPE, 1, json!({}))),
            key: CAPACITY_TYPE,
            skew: vec![2, 2],
            unschedulable: 0,
        },
        Case {
            upstream: "CapacityType: should balance pods across arch (no constraints)",
            pools: vec![pool(
                "default",
                json!({"spec": {"requirements": [{"key": ARCH, "operator": "In", "values": ["arm64"]}]}}),
            )],
            // A single-pod instance type: full.
            nodes: vec![node("amd", json!({ARCH: "amd64"}), json!([]), "100m")],
            bound: on("amd", pods(1, "a", test_labels(), "100m", json!({}))),
            pending: pods(5, "p", test_labels(), "2", spread(ARCH, 1, json!({}))),
            key: ARCH,
            // The existing amd64 node's pod counts: two arm64 pods before the skew breaks.
            skew: vec![1, 2],
            unschedulable: 3,
        },
        Case {
            upstream: "Combined Hostname and Zonal Topology: should balance pods across NodePool requirements",
            pools: vec![
                pool(
                    "spot",
                    json!({"spec": {"requirements": [
                        {"key": CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
                        {"key": "capacity.spread.4-1", "operator": "In", "values": ["2", "3", "4", "5"]}]}}),
                ),
                pool(
                    "on-demand",
                    json!({"spec": {"requirements": [
                        {"key": CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                        {"key": "capacity.spread.4-1", "operator": "In", "values": ["1"]}]}}),
                ),
            ],
            nodes: vec![],
            bound: vec![],
            pending: pods(20, "p", test_labels(), "100m", spread("capacity.spread.4-1", 1, json!({}))),
            key: "capacity.spread.4-1",
            skew: vec![4, 4, 4, 4, 4],
            unschedulable: 0,
        },
        // Three domains known (two tainted nodes, full), pods can only go to baz: one before the skew breaks.
        tainted_nodes("NodeTaintsPolicy: should balance pods across a label (NodeTaintsPolicy=ignore)", "Ignore", vec![1], 4),
        tainted_nodes("NodeTaintsPolicy: should balance pods across a label (NodeTaintsPolicy=honor)", "Honor", vec![5], 0),
        tainted_pool(
            "NodeTaintsPolicy: should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=ignore)",
            "Ignore",
            vec![1],
            1,
        ),
        tainted_pool(
            "NodeTaintsPolicy: should balance pods across a label when discovered from the nodepool (NodeTaintsPolicy=honor)",
            "Honor",
            vec![2],
            0,
        ),
        mismatched_nodes("NodeAffinityPolicy: should balance pods across a label (NodeAffinityPolicy=ignore)", "Ignore", vec![1], 4),
        mismatched_nodes("NodeAffinityPolicy: should balance pods across a label (NodeAffinityPolicy=honor)", "Honor", vec![5], 0),
        Case {
            upstream: "Zonal: should respect minDomains constraints",
            pools: vec![pool("default", zones(&["test-zone-1", "test-zone-2"]))],
            nodes: vec![],
            bound: vec![],
            pending: pods(3, "p", test_labels(), "100m", spread(ZONE, 1, json!({"minDomains": 3}))),
            key: ZONE,
            // Two domains where three are wanted: the global minimum reads as 0, so one pod per zone.
            skew: vec![1, 1],
            unschedulable: 1,
        },
        Case {
            upstream: "Zonal: satisfied minDomains constraints (equal) should allow expected pod scheduling",
            pools: vec![pool("default", zones(&["test-zone-1", "test-zone-2", "test-zone-3"]))],
            nodes: vec![],
            bound: vec![],
            pending: pods(11, "p", test_labels(), "100m", spread(ZONE, 1, json!({"minDomains": 3}))),
            key: ZONE,
            skew: vec![3, 4, 4],
            unschedulable: 0,
        },
        Case {
            upstream: "Zonal: satisfied minDomains constraints (greater than minimum) should allow expected pod scheduling",
            pools: vec![pool("default", zones(&["test-zone-1", "test-zone-2", "test-zone-3"]))],
            nodes: vec![],
            bound: vec![],
            pending: pods(11, "p", test_labels(), "100m", spread(ZONE, 1, json!({"minDomains": 2}))),
            key: ZONE,
            skew: vec![3, 4, 4],
            unschedulable: 0,
        },
        Case {
            upstream: "Hostname: should respect pod affinity (arch)",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: {
                let tsc = json!([{"topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                    "maxSkew": 1, "labelSelector": {"matchLabels": {"security": "s2"}}}]);
                let labels = json!({"security": "s2", "test": "test"});
                [
                    pods(1, "first", labels.clone(), "2",
                        json!({"topologySpreadConstraints": tsc, "nodeSelector": {ARCH: "arm64"}})),
                    pods(1, "second", labels, "1", json!({"topologySpreadConstraints": tsc,
                        "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                            {"topologyKey": ARCH, "labelSelector": {"matchLabels": {"security": "s2"}}}]}}})),
                ]
                .concat()
            },
            key: ARCH,
            // Both on arm64 (on two nodes, which the hostname spread asks).
            skew: vec![2],
            unschedulable: 0,
        },
        Case {
            upstream: "Hostname: should balance pods across nodes",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: pods(4, "p", test_labels(), "100m", spread("kubernetes.io/hostname", 1, json!({}))),
            key: "kubernetes.io/hostname",
            skew: vec![1, 1, 1, 1],
            unschedulable: 0,
        },
        Case {
            upstream: "Pod Affinity/Anti-Affinity: should not violate pod anti-affinity (arch)",
            pools: default_pool(),
            nodes: vec![],
            bound: vec![],
            pending: [
                pods(1, "amd", json!({"security": "s2"}), "100m", json!({"nodeSelector": {ARCH: "amd64"}})),
                pods(1, "anti", test_labels(), "100m", json!({"affinity": {"podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {"topologyKey": ARCH, "labelSelector": {"matchLabels": {"security": "s2"}}}]}}})),
            ]
            .concat(),
            key: ARCH,
            // The anti-affinity pod lands on arm64, away from the amd64 pod.
            skew: vec![1],
            unschedulable: 0,
        },
    ]
}

#[test]
fn topology_cases_decide_as_karpenter_does() {
    let mut failures = Vec::new();
    for case in cases() {
        let (skew, unschedulable) = run(&case);
        if skew != case.skew || unschedulable != case.unschedulable {
            failures.push(format!(
                "{}: counts {skew:?} with {unschedulable} unschedulable, Karpenter: {:?} with {}",
                case.upstream, case.skew, case.unschedulable
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_anti_affinity_pod_takes_the_other_architecture() {
    // The anti-affinity case above counts only the `test` pod; here its architecture is checked.
    let case = cases()
        .into_iter()
        .find(|c| c.upstream.contains("anti-affinity (arch)"))
        .expect("case");
    let catalog = catalog();
    let infos: Vec<PodInfo> = case
        .pending
        .iter()
        .map(|p| PodInfo::from_pod(p).expect("pod"))
        .collect();
    let plan = solve_cluster(&infos, &case.pools, &catalog, &Cluster::default());
    let arch_of = |pod: &str| {
        let claim = plan
            .claims
            .iter()
            .find(|c| c.pods.iter().any(|p| p == pod))
            .expect("placed");
        claim
            .instance_types
            .iter()
            .map(|t| {
                catalog
                    .get(t)
                    .expect("type")
                    .requirements
                    .get(ARCH)
                    .map(ToString::to_string)
            })
            .collect::<Vec<_>>()
    };
    let anti = arch_of("default/anti-0");
    assert!(
        anti.iter()
            .all(|a| a.as_deref().is_some_and(|a| a.contains("arm64"))),
        "{anti:?}"
    );
}

/// Upstream scheduling suite, "Pending Pods by Effective Zone Metric" ("should report zone of pods correctly"):
/// the zone each pending pod's constraints hold it to as the solve starts, over the pods already running in
/// the zones (`bound`, each on a node of its zone).
#[test]
fn the_effective_zone_of_each_pending_pod_is_karpenters() {
    let app = json!({"app": "pod-label"});
    let in_zone = |zone: &str, i: usize| {
        let name = format!("{zone}-{i}");
        let node = node(&name, json!({ZONE: zone}), json!([]), "4");
        let running = on(
            &name,
            pods(1, &format!("running-{name}"), app.clone(), "1", json!({})),
        );
        (node, running)
    };
    let zone_spread = |extra: Value| {
        let mut c = json!({"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule", "maxSkew": 1,
            "labelSelector": {"matchLabels": {"app": "pod-label"}}});
        merge(&mut c, extra);
        json!({"topologySpreadConstraints": [c]})
    };
    let affinity = |kind: &str, labels: Value| {
        json!({"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": ZONE, "labelSelector": {"matchLabels": labels}}]}}})
    };
    // (case, pods running per zone, the pending pods, their effective zones)
    type Case<'a> = (&'a str, &'a [(&'a str, usize)], Vec<Pod>, &'a [&'a str]);
    let cases: Vec<Case> = vec![
        (
            "pods flexible to zones",
            &[],
            pods(2, "p", json!({}), "1", json!({})),
            &["flexible", "flexible"],
        ),
        (
            "a node selector",
            &[],
            pods(
                1,
                "p",
                json!({}),
                "1",
                json!({"nodeSelector": {ZONE: "test-zone-2"}}),
            ),
            &["test-zone-2"],
        ),
        (
            "a preferred zone",
            &[],
            pods(
                1,
                "p",
                json!({}),
                "1",
                json!({"affinity": {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {
                    "matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1"]}]}}]}}}),
            ),
            &["flexible"],
        ),
        (
            "required pod affinity",
            &[("test-zone-1", 1)],
            pods(1, "p", json!({}), "1", affinity("podAffinity", app.clone())),
            &["test-zone-1"],
        ),
        (
            "required pod anti-affinity",
            &[("test-zone-1", 1), ("test-zone-2", 1)],
            pods(
                1,
                "p",
                json!({}),
                "1",
                affinity("podAntiAffinity", app.clone()),
            ),
            &["test-zone-3"],
        ),
        (
            "restricting spread",
            &[("test-zone-1", 1), ("test-zone-2", 1)],
            pods(1, "p", app.clone(), "1", zone_spread(json!({}))),
            &["test-zone-3"],
        ),
        (
            "an unsatisfiable spread",
            &[("test-zone-1", 2), ("test-zone-2", 2), ("test-zone-3", 2)],
            pods(
                1,
                "p",
                json!({}),
                "1",
                zone_spread(json!({"minDomains": 4})),
            ),
            &["none"],
        ),
        (
            "an unsatisfiable pod affinity",
            &[],
            pods(
                1,
                "p",
                json!({}),
                "1",
                affinity("podAffinity", json!({"nonexistent": "label"})),
            ),
            &["none"],
        ),
    ];
    let catalog = catalog();
    let pools = vec![pool("default", json!({}))];
    for (case, running, pending, expected) in cases {
        let (mut nodes, mut bound) = (Vec::new(), Vec::new());
        for (zone, n) in running {
            for i in 0..*n {
                let (node, pods) = in_zone(zone, i);
                nodes.push(node);
                bound.extend(pods);
            }
        }
        let cluster = Cluster::from_objects(
            &nodes,
            &[] as &[kerf::api::nodeclaim::NodeClaim],
            &[],
            &bound,
            &catalog,
        )
        .expect("cluster");
        let infos: Vec<PodInfo> = pending
            .iter()
            .map(|p| PodInfo::from_pod(p).expect("pod"))
            .collect();
        let plan = solve_cluster(&infos, &pools, &catalog, &cluster);
        assert_eq!(plan.effective_zones, *expected, "{case}");
    }
}
