//! Property tests of the scheduling simulation: for random small catalogs, NodePools, existing nodes and pods,
//! every placement respects every hard constraint, and what each claim and node holds fits.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf::api::nodepool::NodePool;
use kerf::catalog::{Catalog, Resources};
use kerf::scheduling::{solve_cluster, Cluster, PodInfo};
use proptest::prelude::*;
use serde_json::{json, Value};
use std::collections::BTreeMap;

const ZONES: [&str; 3] = ["z1", "z2", "z3"];
const ARCHES: [&str; 2] = ["amd64", "arm64"];

#[derive(Clone, Debug)]
struct TypeSpec {
    cpu: u32,
    memory_gi: u32,
    pods: u32,
    arch: usize,
}

#[derive(Clone, Debug)]
struct PoolSpec {
    tainted: bool,
    arch: Option<usize>,
    weight: u8,
}

#[derive(Clone, Debug)]
struct PodSpec {
    cpu_m: u32,
    memory_mi: u32,
    arch: Option<usize>,
    tolerates: bool,
    kind: Kind,
    host_port: bool,
}

/// The topology constraint a pod has, if any.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Plain,
    ZonalSpread,
    HostnameAntiAffinity,
}

#[derive(Clone, Debug)]
struct NodeSpec {
    cpu: u32,
    zone: usize,
    arch: usize,
    /// A bound pod of 500m binding host port 80.
    busy: bool,
}

fn type_spec() -> impl Strategy<Value = TypeSpec> {
    (
        prop::sample::select(vec![1u32, 2, 4, 8]),
        prop::sample::select(vec![2u32, 4, 8, 16]),
        4u32..20,
        0..2usize,
    )
        .prop_map(|(cpu, memory_gi, pods, arch)| TypeSpec {
            cpu,
            memory_gi,
            pods,
            arch,
        })
}

fn pool_spec() -> impl Strategy<Value = PoolSpec> {
    (any::<bool>(), prop::option::of(0..2usize), 0u8..3).prop_map(|(tainted, arch, weight)| {
        PoolSpec {
            tainted,
            arch,
            weight,
        }
    })
}

fn pod_spec() -> impl Strategy<Value = PodSpec> {
    (
        prop::sample::select(vec![100u32, 250, 500, 1000, 1500, 3000]),
        prop::sample::select(vec![128u32, 512, 1024, 4096]),
        prop::option::of(0..2usize),
        any::<bool>(),
        prop::sample::select(vec![
            Kind::Plain,
            Kind::ZonalSpread,
            Kind::HostnameAntiAffinity,
        ]),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(cpu_m, memory_mi, arch, tolerates, kind, host_port)| PodSpec {
                cpu_m,
                memory_mi,
                arch,
                tolerates,
                kind,
                host_port,
            },
        )
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (1u32..5, 0..3usize, 0..2usize, any::<bool>()).prop_map(|(cpu, zone, arch, busy)| NodeSpec {
        cpu,
        zone,
        arch,
        busy,
    })
}

/// Every type is offered in every zone, spot and on-demand, so every pool's zones are the same three.
fn catalog(types: &[TypeSpec]) -> Catalog {
    let types: Vec<Value> = types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let offerings: Vec<Value> = ZONES
                .iter()
                .flat_map(|z| {
                    ["spot", "on-demand"].map(|ct| {
                        json!({"zone": z, "capacityType": ct, "price": f64::from(t.cpu) * 0.1 + i as f64 * 0.001, "available": true})
                    })
                })
                .collect();
            json!({"name": format!("t{i}"), "cpu": t.cpu.to_string(), "memory": format!("{}Gi", t.memory_gi),
                   "pods": t.pods, "arch": ARCHES[t.arch], "os": ["linux"], "labels": {},
                   "overhead": {"cpu": "100m", "memory": "100Mi"}, "offerings": offerings})
        })
        .collect();
    Catalog::from_instance_types_json(&json!({"instanceTypes": types}).to_string())
        .expect("catalog")
}

fn nodepool(i: usize, p: &PoolSpec) -> NodePool {
    let mut requirements = vec![];
    if let Some(arch) = p.arch {
        requirements
            .push(json!({"key": "kubernetes.io/arch", "operator": "In", "values": [ARCHES[arch]]}));
    }
    let taints = if p.tainted {
        json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": format!("pool-{i}")},
        "spec": {"weight": p.weight, "template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": requirements, "taints": taints}}}}))
    .expect("nodepool")
}

fn pod_json(name: &str, p: &PodSpec) -> Value {
    let label = match p.kind {
        Kind::Plain => "plain",
        Kind::ZonalSpread => "spread",
        Kind::HostnameAntiAffinity => "anti",
    };
    let mut container = json!({"name": "c", "resources": {"requests": {"cpu": format!("{}m", p.cpu_m), "memory": format!("{}Mi", p.memory_mi)}}});
    if p.host_port {
        container["ports"] = json!([{"containerPort": 80, "hostPort": 80}]);
    }
    let mut spec = json!({"containers": [container]});
    if let Some(arch) = p.arch {
        spec["nodeSelector"] = json!({"kubernetes.io/arch": ARCHES[arch]});
    }
    if p.tolerates {
        spec["tolerations"] = json!([{"key": "dedicated", "operator": "Exists"}]);
    }
    let selector = json!({"matchLabels": {"kind": label}});
    match p.kind {
        Kind::Plain => {}
        Kind::ZonalSpread => {
            // Every spread pod counts every node (not only those of its own architecture, the default), so that
            // they all share one skew.
            spec["topologySpreadConstraints"] = json!([{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector, "nodeAffinityPolicy": "Ignore"}]);
        }
        Kind::HostnameAntiAffinity => {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}]}});
        }
    }
    json!({"metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"kind": label}}, "spec": spec})
}

fn node(i: usize, n: &NodeSpec) -> Node {
    serde_json::from_value(json!({"metadata": {"name": format!("node-{i}"), "labels": {
            "topology.kubernetes.io/zone": ZONES[n.zone], "kubernetes.io/arch": ARCHES[n.arch],
            "kubernetes.io/os": "linux", "karpenter.sh/capacity-type": "on-demand"}},
        "status": {"allocatable": {"cpu": n.cpu.to_string(), "memory": "16Gi", "pods": "20"}}}))
    .expect("node")
}

fn agent() -> DaemonSet {
    serde_json::from_value(json!({"metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": {"metadata": {"labels": {"app": "agent"}},
            "spec": {"tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}}]}}}}))
    .expect("daemonset")
}

/// Where a pod ended up.
#[derive(Debug)]
struct Host {
    zone: Option<String>,
    arch: Vec<String>,
    /// Whether the host has the pools' `dedicated` taint.
    taints: bool,
    /// The pods placed there.
    pods: Vec<usize>,
    /// Bindings of host port 80 before the solve.
    ports: usize,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_placement_respects_every_hard_constraint(
        types in prop::collection::vec(type_spec(), 1..6),
        pools in prop::collection::vec(pool_spec(), 1..3),
        nodes in prop::collection::vec(node_spec(), 0..3),
        pods in prop::collection::vec(pod_spec(), 1..30),
        with_agent in any::<bool>(),
    ) {
        let catalog = catalog(&types);
        let nodepools: Vec<NodePool> = pools.iter().enumerate().map(|(i, p)| nodepool(i, p)).collect();
        let node_objects: Vec<Node> = nodes.iter().enumerate().map(|(i, n)| node(i, n)).collect();
        let bound: Vec<Pod> = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.busy)
            .map(|(i, _)| {
                let mut pod = pod_json(&format!("bound-{i}"), &PodSpec {
                    cpu_m: 500, memory_mi: 128, arch: None, tolerates: false, kind: Kind::Plain, host_port: true,
                });
                pod["spec"]["nodeName"] = json!(format!("node-{i}"));
                serde_json::from_value(pod).expect("pod")
            })
            .collect();
        let daemonsets = if with_agent { vec![agent()] } else { vec![] };
        let cluster = Cluster::from_objects(&node_objects, &[] as &[kerf::api::nodeclaim::NodeClaim], &daemonsets, &bound, &catalog).expect("cluster");
        let infos: Vec<PodInfo> = pods
            .iter()
            .enumerate()
            .map(|(i, p)| PodInfo::from_pod(&serde_json::from_value(pod_json(&format!("p{i}"), p)).expect("pod")).expect("info"))
            .collect();
        let plan = solve_cluster(&infos, &nodepools, &catalog, &cluster);
        let index: BTreeMap<&str, usize> = infos.iter().enumerate().map(|(i, p)| (p.key.as_str(), i)).collect();
        let agent_requests = if with_agent {
            Resources::from_quantities([("cpu", "200m"), ("memory", "64Mi"), ("pods", "1")]).expect("requests")
        } else {
            Resources::default()
        };

        // Every pod is placed once or reported.
        let mut seen = vec![0; infos.len()];
        for key in plan.claims.iter().flat_map(|c| &c.pods)
            .chain(plan.existing.iter().flat_map(|n| &n.pods))
            .chain(plan.unschedulable.iter().map(|u| &u.pod))
        {
            seen[index[key.as_str()]] += 1;
        }
        prop_assert!(seen.iter().all(|s| *s == 1), "{seen:?} {plan:?}");

        let mut hosts: Vec<Host> = Vec::new();
        for claim in &plan.claims {
            prop_assert!(!claim.instance_types.is_empty());
            let pool = &pools[claim.nodepool.trim_start_matches("pool-").parse::<usize>().expect("pool index")];
            let placed: Vec<usize> = claim.pods.iter().map(|k| index[k.as_str()]).collect();
            let mut used = Resources::default();
            for p in &placed {
                used += &infos[*p].requests;
            }
            // The pods and the daemon fit every instance type the claim may launch.
            for name in claim.instance_types.iter() {
                let it = catalog.get(name).expect("type");
                let needed = used.clone() + &agent_requests;
                prop_assert!(needed.fits_in(&it.allocatable()), "{name}: {needed:?} > {:?}", it.allocatable());
            }
            let arch: Vec<String> = claim.instance_types.iter()
                .map(|n| catalog.get(n).expect("type").requirements.get("kubernetes.io/arch")
                    .and_then(|r| r.values()).and_then(|v| v.first().cloned()).unwrap_or_default())
                .collect();
            let zone = claim.requirements.get("topology.kubernetes.io/zone")
                .and_then(|r| r.values()).filter(|v| v.len() == 1).and_then(|v| v.first().cloned());
            hosts.push(Host { zone, arch, taints: pool.tainted, pods: placed, ports: 0 });
        }
        for placement in &plan.existing {
            let i: usize = placement.node.trim_start_matches("node-").parse().expect("node index");
            let n = &nodes[i];
            let placed: Vec<usize> = placement.pods.iter().map(|k| index[k.as_str()]).collect();
            let mut used = agent_requests.clone();
            if n.busy {
                used += &Resources::from_quantities([("cpu", "500m"), ("memory", "128Mi"), ("pods", "1")]).expect("requests");
            }
            for p in &placed {
                used += &infos[*p].requests;
            }
            let allocatable = Resources::from_quantities([("cpu", n.cpu.to_string()), ("memory", "16Gi".to_owned()), ("pods", "20".to_owned())]).expect("allocatable");
            prop_assert!(used.fits_in(&allocatable), "node-{i}: {used:?} > {allocatable:?}");
            hosts.push(Host { zone: Some(ZONES[n.zone].to_owned()), arch: vec![ARCHES[n.arch].to_owned()], taints: false,
                              pods: placed, ports: usize::from(n.busy) });
        }

        let mut spread_per_zone: BTreeMap<&str, usize> = ZONES.iter().map(|z| (*z, 0)).collect();
        for host in &hosts {
            let mut anti = 0;
            let mut ports = host.ports;
            for p in &host.pods {
                let spec = &pods[*p];
                // Requirements: the pod's architecture is the architecture of everything the host may be.
                if let Some(arch) = spec.arch {
                    prop_assert!(host.arch.iter().all(|a| a == ARCHES[arch]), "{spec:?} on {:?}", host.arch);
                }
                // Taints.
                prop_assert!(!host.taints || spec.tolerates, "{spec:?} on a tainted pool");
                anti += usize::from(spec.kind == Kind::HostnameAntiAffinity);
                ports += usize::from(spec.host_port);
                if spec.kind == Kind::ZonalSpread {
                    let zone = ZONES.iter().find(|z| host.zone.as_deref() == Some(**z));
                    prop_assert!(zone.is_some(), "a spread pod on a host without one zone");
                    *spread_per_zone.entry(zone.copied().unwrap_or_default()).or_default() += 1;
                }
            }
            // Required hostname anti-affinity: one such pod per host; host ports: one binding of port 80.
            prop_assert!(anti <= 1, "{anti} anti-affinity pods on one host");
            prop_assert!(ports <= 1, "port 80 bound {ports} times on one host");
        }
        // Required zonal spread with maxSkew 1 over the eligible zones: the three every type offers when some pool
        // can launch a type, else the zones of the existing nodes.
        let launchable = pools.iter().any(|p| types.iter().any(|t| p.arch.is_none_or(|a| a == t.arch)));
        spread_per_zone.retain(|zone, _| launchable || nodes.iter().any(|n| ZONES[n.zone] == *zone));
        let max = spread_per_zone.values().max().copied().unwrap_or(0);
        let min = spread_per_zone.values().min().copied().unwrap_or(0);
        prop_assert!(max - min <= 1, "{spread_per_zone:?}");
    }
}
