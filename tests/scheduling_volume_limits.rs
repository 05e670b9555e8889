//! CSI attach limits of existing nodes, as Karpenter v1.14 keeps to them: cases of the "VolumeUsage" context of
//! `pkg/controllers/provisioning/scheduling/suite_test.go`, told in kerf's terms (upstream names in each test's
//! comment).

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kerf::api::nodepool::NodePool;
use kerf::catalog::Catalog;
use kerf::scheduling::volumes::VolumeIndex;
use kerf::scheduling::{Cluster, Plan, PodInfo, Scheduler};
use serde_json::{json, Value};
use std::sync::Arc;

const DRIVER: &str = "fake.csi.provider";

fn catalog() -> Catalog {
    let file = json!({"instanceTypes": [{"name": "instance-type", "cpu": "1024", "memory": "1024Gi", "pods": 1024,
        "arch": "amd64", "os": ["linux"], "labels": {}, "overhead": {},
        "offerings": [{"zone": "test-zone-1", "capacityType": "on-demand", "price": 1.0}]}]});
    Catalog::from_instance_types_json(&file.to_string()).expect("catalog")
}

fn pool() -> NodePool {
    serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []}}}}))
    .expect("nodepool")
}

/// The node Karpenter launched for a first pod, with room for many more pods, and its CSINode allowing
/// `limit` volumes of the test driver.
fn node_and_csi(limit: i32) -> (Node, CSINode) {
    let node = serde_json::from_value(json!({"metadata": {"name": "node-1", "labels": {
            "kubernetes.io/hostname": "node-1", "topology.kubernetes.io/zone": "test-zone-1",
            "karpenter.sh/capacity-type": "on-demand", "node.kubernetes.io/instance-type": "instance-type"}},
        "status": {"allocatable": {"cpu": "1024", "memory": "1024Gi", "pods": "1024"}}}))
    .expect("node");
    let csi = serde_json::from_value(json!({"metadata": {"name": "node-1"},
        "spec": {"drivers": [{"name": DRIVER, "nodeID": "fake-node-id", "allocatable": {"count": limit}}]}}))
    .expect("csinode");
    (node, csi)
}

fn object<T: serde::de::DeserializeOwned>(value: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(value).expect("object"))
}

fn pod(name: &str, claims: &[String]) -> Pod {
    let volumes: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": name},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}], "volumes": volumes}}))
    .expect("pod")
}

/// Solves `pending` over the existing node (with the index's CSINode) and new claims.
fn solve(pending: &[Pod], index: &VolumeIndex, node: &Node) -> Plan {
    let catalog = catalog();
    let bound: [Pod; 0] = [];
    let cluster = Cluster::from_objects(
        std::slice::from_ref(node),
        &[] as &[kerf::api::nodeclaim::NodeClaim],
        &[],
        &bound,
        &catalog,
    )
    .expect("cluster")
    .with_volume_limits(index, &bound);
    let infos: Vec<PodInfo> = pending
        .iter()
        .map(|p| {
            let mut info = PodInfo::from_pod(p).expect("pod");
            kerf::scheduling::volumes::apply(&mut info, &index.pending(p).expect("volumes"));
            info.attached = index.attached(p);
            info
        })
        .collect();
    Scheduler::new(&[pool()], &catalog).solve_on(&infos, &cluster.nodes)
}

#[test]
fn a_node_at_its_volume_limit_takes_no_more_pods() {
    // Upstream: "should launch multiple nodes if required due to volume limits". Six pods with two claims each of
    // a WaitForFirstConsumer class of the driver; the node may attach 10 volumes: five pods fit, the sixth needs
    // a new node.
    let (node, csi) = node_and_csi(10);
    let class = object::<StorageClass>(
        json!({"metadata": {"name": "my-storage-class"}, "provisioner": DRIVER,
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["test-zone-1"]}]}]}),
    );
    let mut claims = Vec::new();
    let mut pods = Vec::new();
    for i in 0..6 {
        let names = [format!("my-claim-a-{i}"), format!("my-claim-b-{i}")];
        for n in &names {
            claims.push(object::<PersistentVolumeClaim>(json!({"metadata": {"name": n, "namespace": "default"},
                "spec": {"storageClassName": "my-storage-class", "accessModes": ["ReadWriteOnce"]}})));
        }
        pods.push(pod(&format!("p{i}"), &names));
    }
    let index = VolumeIndex::from_objects(claims, [], [class]).with_csi_nodes([Arc::new(csi)]);
    let plan = solve(&pods, &index, &node);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert_eq!(plan.existing.len(), 1);
    assert_eq!(plan.existing[0].pods.len(), 5);
    assert_eq!(plan.claims.len(), 1);
    assert_eq!(plan.claims[0].pods.len(), 1);
}

#[test]
fn pods_sharing_one_claim_attach_it_once() {
    // Upstream: "should launch a single node if all pods use the same PVC". Every pod mounts the same bound claim:
    // one volume on the node, so all of them fit under a limit of 10.
    let (node, csi) = node_and_csi(10);
    let volume = object::<PersistentVolume>(json!({"metadata": {"name": "my-volume"},
        "spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}, "capacity": {"storage": "1Gi"},
                 "accessModes": ["ReadWriteOnce"],
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-1"]}]}]}}}}));
    let claim = object::<PersistentVolumeClaim>(
        json!({"metadata": {"name": "my-claim", "namespace": "default",
            "annotations": {"pv.kubernetes.io/bind-completed": "yes"}},
        "spec": {"volumeName": "my-volume", "accessModes": ["ReadWriteOnce"]}}),
    );
    let index = VolumeIndex::from_objects([claim], [volume], []).with_csi_nodes([Arc::new(csi)]);
    let pods: Vec<Pod> = (0..20)
        .map(|i| pod(&format!("p{i}"), &["my-claim".to_owned()]))
        .collect();
    let plan = solve(&pods, &index, &node);
    assert!(plan.unschedulable.is_empty(), "{:?}", plan.unschedulable);
    assert!(plan.claims.is_empty(), "{:?}", plan.claims);
    assert_eq!(plan.existing[0].pods.len(), 20);
}

#[test]
fn volumes_already_on_the_node_count_against_the_limit() {
    // Bound pods' volumes count: with 9 of 10 attached, only a pod adding one more fits.
    let (node, csi) = node_and_csi(10);
    let class = object::<StorageClass>(json!({"metadata": {"name": "sc"}, "provisioner": DRIVER,
        "volumeBindingMode": "WaitForFirstConsumer"}));
    let claim = |n: String| {
        object::<PersistentVolumeClaim>(json!({"metadata": {"name": n, "namespace": "default"},
            "spec": {"storageClassName": "sc", "accessModes": ["ReadWriteOnce"]}}))
    };
    let running: Vec<String> = (0..9).map(|i| format!("running-{i}")).collect();
    let mut bound = pod("running", &running);
    bound.spec.as_mut().expect("spec").node_name = Some("node-1".to_owned());
    let claims: Vec<_> = running
        .iter()
        .cloned()
        .chain(["one".to_owned(), "two-a".to_owned(), "two-b".to_owned()])
        .map(claim)
        .collect();
    let index = VolumeIndex::from_objects(claims, [], [class]).with_csi_nodes([Arc::new(csi)]);
    let catalog = catalog();
    let cluster = Cluster::from_objects(
        std::slice::from_ref(&node),
        &[] as &[kerf::api::nodeclaim::NodeClaim],
        &[],
        std::slice::from_ref(&bound),
        &catalog,
    )
    .expect("cluster")
    .with_volume_limits(&index, std::slice::from_ref(&bound));
    let info = |p: &Pod| {
        let mut info = PodInfo::from_pod(p).expect("pod");
        info.attached = index.attached(p);
        info
    };
    let two = info(&pod("two", &["two-a".to_owned(), "two-b".to_owned()]));
    let one = info(&pod("one", &["one".to_owned()]));
    let scheduler = Scheduler::new(&[pool()], &catalog);
    let plan = scheduler.solve_on(&[two], &cluster.nodes);
    assert!(plan.existing.is_empty(), "{plan:?}");
    assert_eq!(plan.claims.len(), 1);
    let plan = scheduler.solve_on(&[one], &cluster.nodes);
    assert_eq!(plan.existing.len(), 1, "{plan:?}");
}
