//! Karpenter's volume-topology tests in kerf's words: each case names the upstream test it comes from
//! (`provisioning/suite_test.go` "Volume Topology Requirements", `provisioning/scheduling/suite_test.go`
//! "VolumeUsage" and the storage-class cases after it, `provisioning/scheduling/topology_test.go` "Topology with
//! Volume Requirements"; Karpenter v1.14.1).

use super::*;
use crate::api::nodepool::NodePool;
use crate::catalog::Catalog;
use crate::scheduling::{solve, Plan};
use serde_json::{json, Value};

const ZONE: &str = "topology.kubernetes.io/zone";
const WFFC: Option<&str> = Some("WaitForFirstConsumer");

fn object<T: serde::de::DeserializeOwned>(value: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(value).expect("a valid object"))
}

/// A claim in `default`, bound (with the PV controller's annotation, as Karpenter's test helper sets it) when
/// it names a volume. `class: None` leaves `storageClassName` unset.
fn pvc(name: &str, class: Option<&str>, volume: Option<&str>) -> Value {
    json!({
        "metadata": {"name": name, "namespace": "default",
                     "annotations": volume.map(|_| json!({(BIND_COMPLETED_ANNOTATION): "yes"}))},
        "spec": {"storageClassName": class, "volumeName": volume,
                 "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    })
}

/// A CSI volume whose node affinity is `terms` (`null` for none).
fn pv(name: &str, terms: Value) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {"csi": {"driver": "test.driver", "volumeHandle": "h"}, "capacity": {"storage": "100Gi"},
                 "accessModes": ["ReadWriteOnce"],
                 "nodeAffinity": if terms.is_null() { Value::Null } else { json!({"required": {"nodeSelectorTerms": terms}}) }}
    })
}

/// A volume in `zones` (one term, as Karpenter's helper writes it).
fn zonal_pv(name: &str, zones: &[&str]) -> Value {
    pv(
        name,
        json!([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": zones}]}]),
    )
}

/// A class with one allowed-topology term on `zones`, if any.
fn class(name: &str, mode: Option<&str>, zones: Option<&[&str]>) -> Value {
    json!({
        "metadata": {"name": name},
        "provisioner": "test-provisioner",
        "volumeBindingMode": mode,
        "allowedTopologies": zones.map(|z| json!([{"matchLabelExpressions": [{"key": ZONE, "values": z}]}]))
    })
}

fn default_class(name: &str, created: &str) -> Value {
    json!({
        "metadata": {"name": name, "creationTimestamp": created,
                     "annotations": {(DEFAULT_CLASS_ANNOTATION): "true"}},
        "provisioner": "test-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE, "values": [format!("zone-of-{name}")]}]}]
    })
}

fn index(claims: Vec<Value>, volumes: Vec<Value>, classes: Vec<Value>) -> VolumeIndex {
    VolumeIndex::from_objects(
        claims.into_iter().map(object),
        volumes.into_iter().map(object),
        classes.into_iter().map(object),
    )
}

/// Pod `p` in `default`, with `spec` merged over one 1-CPU container.
fn pod(spec: Value) -> Pod {
    let mut base = json!({"metadata": {"name": "p", "namespace": "default", "uid": "p"},
                          "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}});
    if let (Some(base), Value::Object(extra)) = (base["spec"].as_object_mut(), spec) {
        base.extend(extra);
    }
    serde_json::from_value(base).expect("a valid pod")
}

/// A pod that mounts the claims `names`.
fn with_claims(names: &[&str]) -> Pod {
    pod(
        json!({"volumes": names.iter().enumerate().map(|(i, n)| json!({
        "name": format!("v{i}"), "persistentVolumeClaim": {"claimName": n}
    })).collect::<Vec<_>>()}),
    )
}

/// A pod with a generic ephemeral volume `data` whose template names `class` (`None`: no class).
fn with_ephemeral(class: Option<&str>) -> Pod {
    pod(
        json!({"volumes": [{"name": "data", "ephemeral": {"volumeClaimTemplate": {"spec": {
            "storageClassName": class, "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}
        }}}}]}),
    )
}

fn shown(alternatives: &[Requirements]) -> Vec<String> {
    alternatives.iter().map(ToString::to_string).collect()
}

#[test]
fn pending_pods_are_refused_for_the_claims_karpenter_ignores_them_for() {
    let wffc = || class("wffc", WFFC, Some(&["test-zone-1"]));
    let deleting = |mut v: Value| {
        v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        v["metadata"]["finalizers"] = json!(["kubernetes.io/pvc-protection"]);
        v
    };
    let unannotated = |mut v: Value| {
        v["metadata"]["annotations"] = Value::Null;
        v
    };
    let lost = |mut v: Value| {
        v["status"] = json!({"phase": "Lost"});
        v
    };
    // (upstream test, index, pod, the refusal's label or None)
    let cases: Vec<(&str, VolumeIndex, Pod, Option<&str>)> = vec![
        (
            "should not schedule if invalid pvc",
            index(vec![], vec![], vec![]),
            with_claims(&["invalid"]),
            Some("claim_not_found"),
        ),
        (
            "should schedule with an empty storage class if the pvc is bound",
            index(
                vec![pvc("data", Some(""), Some("vol"))],
                vec![pv("vol", Value::Null)],
                vec![],
            ),
            with_claims(&["data"]),
            None,
        ),
        (
            "should not schedule with an empty storage class if the pvc is not bound",
            index(vec![pvc("data", Some(""), None)], vec![], vec![]),
            with_claims(&["data"]),
            Some("no_storage_class"),
        ),
        (
            "should schedule with a missing storage class if the pvc is bound",
            index(
                vec![pvc("data", Some("missing-storage-class"), Some("vol"))],
                vec![pv("vol", Value::Null)],
                vec![],
            ),
            with_claims(&["data"]),
            None,
        ),
        (
            "should not schedule with a missing storage class if the pvc is not bound",
            index(
                vec![pvc("data", Some("missing-storage-class"), None)],
                vec![],
                vec![],
            ),
            with_claims(&["data"]),
            Some("class_not_found"),
        ),
        (
            "should schedule valid pods when a pod with an invalid pvc is encountered (volume name)",
            index(
                vec![pvc("data", None, Some("invalid-volume-name"))],
                vec![],
                vec![],
            ),
            with_claims(&["data"]),
            Some("volume_not_found"),
        ),
        (
            "should not launch nodes for pod with unbound volume for volumeBindingMode immediate",
            index(
                vec![pvc("data", Some("immediate"), None)],
                vec![],
                vec![class("immediate", Some("Immediate"), Some(&["test-zone-1"]))],
            ),
            with_claims(&["data"]),
            Some("immediate_unbound"),
        ),
        (
            // kerf: a class that says no binding mode has the apiserver's default, Immediate.
            "(kerf) an unbound claim of a class without volumeBindingMode",
            index(
                vec![pvc("data", Some("plain"), None)],
                vec![],
                vec![class("plain", None, None)],
            ),
            with_claims(&["data"]),
            Some("immediate_unbound"),
        ),
        (
            "should not launch nodes for pod with deleting persistentVolumeClaim",
            index(
                vec![deleting(pvc("data", Some("wffc"), None))],
                vec![],
                vec![wffc()],
            ),
            with_claims(&["data"]),
            Some("claim_deleting"),
        ),
        (
            "should not launch nodes for pod with bound persistentVolume that is marked for deletion",
            index(
                vec![pvc("p-data", None, Some("vol"))],
                vec![deleting(pv("vol", Value::Null))],
                vec![],
            ),
            with_ephemeral(None),
            Some("volume_deleting"),
        ),
        (
            "should not launch nodes for pod with Lost persistentVolumeClaim",
            index(vec![lost(pvc("data", Some("wffc"), None))], vec![], vec![wffc()]),
            with_claims(&["data"]),
            Some("claim_lost"),
        ),
        (
            "should handle pods with PVCs with defined volumeName: when pv.kubernetes.io/bind-completed is missing",
            index(
                vec![unannotated(pvc("data", Some("wffc"), Some("vol")))],
                vec![pv("vol", Value::Null)],
                vec![wffc()],
            ),
            with_claims(&["data"]),
            Some("claim_not_bound"),
        ),
        (
            "should handle pods with PVCs with defined volumeName: when pv.kubernetes.io/bind-completed is present",
            index(
                vec![pvc("data", Some("wffc"), Some("vol"))],
                vec![pv("vol", Value::Null)],
                vec![wffc()],
            ),
            with_claims(&["data"]),
            None,
        ),
        (
            "should not launch nodes for pods with ephemeral volume without a storage class when the PVC is unbound: non-existent storage class",
            index(vec![], vec![], vec![]),
            with_ephemeral(Some("non-existent")),
            Some("class_not_found"),
        ),
        (
            "should not launch nodes for pods with ephemeral volume without a storage class when the PVC is unbound: explicitly disabled storage class (empty string)",
            index(vec![], vec![], vec![]),
            with_ephemeral(Some("")),
            Some("no_storage_class"),
        ),
        (
            "should launch nodes for pods with ephemeral volume without a storage class when the PVC is bound: non-existent storage class",
            index(
                vec![pvc("p-data", Some("non-existent"), Some("test-pv"))],
                vec![pv("test-pv", Value::Null)],
                vec![],
            ),
            with_ephemeral(Some("non-existent")),
            None,
        ),
        (
            "should launch nodes for pods with ephemeral volume without a storage class when the PVC is bound: explicitly disabled storage class (empty string)",
            index(
                vec![pvc("p-data", Some(""), Some("test-pv"))],
                vec![pv("test-pv", Value::Null)],
                vec![],
            ),
            with_ephemeral(Some("")),
            None,
        ),
        (
            "(kerf) volumes without a claim (emptyDir, hostPath, configMap) are no concern",
            index(vec![], vec![], vec![]),
            pod(json!({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "b", "hostPath": {"path": "/x"}},
                                   {"name": "c", "configMap": {"name": "cm"}}]})),
            None,
        ),
    ];
    for (name, index, pod, expected) in cases {
        let got = index.pending(&pod);
        assert_eq!(
            got.as_ref().err().map(VolumeError::metric_label),
            expected,
            "{name}: {got:?}"
        );
    }
}

#[test]
fn refusals_read_as_karpenter_writes_them() {
    let missing = index(vec![], vec![], vec![])
        .pending(&with_claims(&["invalid"]))
        .expect_err("refused");
    assert_eq!(
        missing.to_string(),
        "getting persistent volume claim, persistentvolumeclaims \"invalid\" not found"
    );
    let unknown = index(vec![pvc("data", Some("gold"), None)], vec![], vec![])
        .pending(&with_claims(&["data"]))
        .expect_err("refused");
    assert_eq!(
        unknown.to_string(),
        "failed to validate pvc, failed to get storage class, storageclasses.storage.k8s.io \"gold\" not found \
         (PersistentVolumeClaim=default/data)"
    );
    let immediate = index(
        vec![pvc("data", Some("fast"), None)],
        vec![],
        vec![class("fast", Some("Immediate"), None)],
    )
    .pending(&with_claims(&["data"]))
    .expect_err("refused");
    assert_eq!(
        immediate.to_string(),
        "failed to validate pvc, pvc with immediate volume binding mode must be bound \
         (PersistentVolumeClaim=default/data, StorageClass=fast)"
    );
}

#[test]
fn the_requirements_each_claim_brings() {
    let wffc = || class("wffc", WFFC, Some(&["test-zone-2", "test-zone-3"]));
    let host_pv = |name: &str, source: Value, terms: Value| {
        let mut v = pv(name, terms);
        v["spec"]["csi"] = Value::Null;
        if let Some(spec) = v["spec"].as_object_mut() {
            if let Value::Object(source) = source {
                spec.extend(source);
            }
        }
        v
    };
    let hostname_term = json!([{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["some-old-host"]}]}]);
    let hostname_or_zone = json!([
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["existing-host"]}]},
        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["invalid-zone"]}]}]);
    let local = json!({"local": {"path": "/mnt/local-disks"}});
    let host_path = json!({"hostPath": {"path": "/mnt/local-disks"}});
    // (upstream test, index, pod, the alternatives)
    let cases: Vec<(&str, VolumeIndex, Pod, Vec<&str>)> = vec![
        (
            "should schedule to storage class zones if volume does not exist",
            index(vec![pvc("data", Some("wffc"), None)], vec![], vec![wffc()]),
            with_claims(&["data"]),
            vec!["topology.kubernetes.io/zone In [test-zone-2 test-zone-3]"],
        ),
        (
            "should schedule to storage class zones if volume does not exist (ephemeral volume)",
            index(vec![pvc("p-data", Some("wffc"), None)], vec![], vec![wffc()]),
            with_ephemeral(Some("wffc")),
            vec!["topology.kubernetes.io/zone In [test-zone-2 test-zone-3]"],
        ),
        (
            "should schedule to volume zones if volume already bound",
            index(
                vec![pvc("data", Some("wffc"), Some("vol"))],
                vec![zonal_pv("vol", &["test-zone-3"])],
                vec![wffc()],
            ),
            with_claims(&["data"]),
            vec!["topology.kubernetes.io/zone In [test-zone-3]"],
        ),
        (
            "should schedule to volume zones if volume already bound (ephemeral volume)",
            index(
                vec![pvc("p-data", Some("wffc"), Some("vol"))],
                vec![zonal_pv("vol", &["test-zone-3"])],
                vec![wffc()],
            ),
            with_ephemeral(Some("wffc")),
            vec!["topology.kubernetes.io/zone In [test-zone-3]"],
        ),
        (
            "should ignore hostname affinity scheduling when using local path volumes: when using local volumes",
            index(
                vec![pvc("data", Some("local-path"), Some("vol"))],
                vec![host_pv("vol", local.clone(), hostname_term.clone())],
                vec![],
            ),
            with_claims(&["data"]),
            vec![],
        ),
        (
            "should ignore hostname affinity scheduling when using local path volumes: when using hostpath volumes",
            index(
                vec![pvc("data", Some("local-path"), Some("vol"))],
                vec![host_pv("vol", host_path.clone(), hostname_term.clone())],
                vec![],
            ),
            with_claims(&["data"]),
            vec![],
        ),
        (
            "should not ignore hostname affinity when using non-local path volumes",
            index(
                vec![pvc("data", Some("wffc"), Some("vol"))],
                vec![pv("vol", hostname_term.clone())],
                vec![wffc()],
            ),
            with_claims(&["data"]),
            vec!["kubernetes.io/hostname In [some-old-host]"],
        ),
        (
            "should preserve unconstrained PV alternatives after ignoring hostname affinity: for local volumes",
            index(
                vec![pvc("data", None, Some("vol"))],
                vec![host_pv("vol", local, hostname_or_zone.clone())],
                vec![],
            ),
            with_claims(&["data"]),
            vec!["", "topology.kubernetes.io/zone In [invalid-zone]"],
        ),
        (
            "should preserve unconstrained PV alternatives after ignoring hostname affinity: for hostpath volumes",
            index(
                vec![pvc("data", None, Some("vol"))],
                vec![host_pv("vol", host_path, hostname_or_zone)],
                vec![],
            ),
            with_claims(&["data"]),
            vec!["", "topology.kubernetes.io/zone In [invalid-zone]"],
        ),
        (
            "should schedule pods using a PV with multiple zones",
            index(
                vec![pvc("data", None, Some("vol"))],
                vec![pv(
                    "vol",
                    json!([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1"]}]},
                           {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-2"]}]}]),
                )],
                vec![],
            ),
            with_claims(&["data"]),
            vec![
                "topology.kubernetes.io/zone In [test-zone-1]",
                "topology.kubernetes.io/zone In [test-zone-2]",
            ],
        ),
        (
            "should schedule pods using a StorageClass with multiple zones in AllowedTopologies",
            index(
                vec![pvc("data", Some("multi-zone-sc"), None)],
                vec![],
                vec![json!({"metadata": {"name": "multi-zone-sc"}, "provisioner": "p",
                    "volumeBindingMode": "WaitForFirstConsumer", "allowedTopologies": [
                        {"matchLabelExpressions": [{"key": ZONE, "values": ["test-zone-1"]}]},
                        {"matchLabelExpressions": [{"key": ZONE, "values": ["test-zone-2"]}]}]})],
            ),
            with_claims(&["data"]),
            vec![
                "topology.kubernetes.io/zone In [test-zone-1]",
                "topology.kubernetes.io/zone In [test-zone-2]",
            ],
        ),
        (
            "should schedule pods when a valid multi-volume topology alternative remains after pruning disjoint branches",
            index(
                vec![pvc("a", Some("pruned-overlap-a"), None), pvc("b", Some("pruned-overlap-b"), None)],
                vec![],
                vec![
                    json!({"metadata": {"name": "pruned-overlap-a"}, "provisioner": "p",
                        "volumeBindingMode": "WaitForFirstConsumer", "allowedTopologies": [
                            {"matchLabelExpressions": [{"key": "example.com/exotic", "values": ["required"]}]},
                            {"matchLabelExpressions": [{"key": "example.com/exotic", "values": ["optional"]}]}]}),
                    json!({"metadata": {"name": "pruned-overlap-b"}, "provisioner": "p",
                        "volumeBindingMode": "WaitForFirstConsumer", "allowedTopologies": [
                            {"matchLabelExpressions": [{"key": ZONE, "values": ["test-zone-1"]},
                                                       {"key": "example.com/exotic", "values": ["optional"]}]},
                            {"matchLabelExpressions": [{"key": ZONE, "values": ["test-zone-2"]},
                                                       {"key": "example.com/exotic", "values": ["required"]}]}]}),
                ],
            ),
            with_claims(&["a", "b"]),
            vec![
                "example.com/exotic In [required], topology.kubernetes.io/zone In [test-zone-2]",
                "example.com/exotic In [optional], topology.kubernetes.io/zone In [test-zone-1]",
            ],
        ),
        (
            // volumetopology.go keeps every crossed branch when none is compatible, and the solve says why.
            "(kerf) two volumes in disjoint zones keep their contradiction for the solve to report",
            index(
                vec![pvc("a", None, Some("va")), pvc("b", None, Some("vb"))],
                vec![zonal_pv("va", &["test-zone-1"]), zonal_pv("vb", &["test-zone-2"])],
                vec![],
            ),
            with_claims(&["a", "b"]),
            vec!["topology.kubernetes.io/zone DoesNotExist"],
        ),
        (
            "should launch nodes for pods with ephemeral volume using the specified storage class name",
            index(
                vec![],
                vec![],
                vec![
                    class("my-storage-class", WFFC, Some(&["test-zone-1"])),
                    default_class("default-storage-class", "2026-01-01T00:00:00Z"),
                ],
            ),
            with_ephemeral(Some("my-storage-class")),
            vec!["topology.kubernetes.io/zone In [test-zone-1]"],
        ),
        (
            "should launch nodes for pods with ephemeral volume using a default storage class",
            index(
                vec![],
                vec![],
                vec![default_class("default-storage-class", "2026-01-01T00:00:00Z")],
            ),
            with_ephemeral(None),
            vec!["topology.kubernetes.io/zone In [zone-of-default-storage-class]"],
        ),
        (
            "should launch nodes for pods with ephemeral volume using the newest storage class",
            index(
                vec![],
                vec![],
                vec![
                    default_class("default-storage-class", "2026-01-01T00:00:00Z"),
                    default_class("newer-default-storage-class", "2026-01-01T00:00:02Z"),
                ],
            ),
            with_ephemeral(None),
            vec!["topology.kubernetes.io/zone In [zone-of-newer-default-storage-class]"],
        ),
        (
            "(kerf) a claim that names no class gets the default one too, as the apiserver gives it",
            index(
                vec![pvc("data", None, None)],
                vec![],
                vec![default_class("gp3", "2026-01-01T00:00:00Z")],
            ),
            with_claims(&["data"]),
            vec!["topology.kubernetes.io/zone In [zone-of-gp3]"],
        ),
        (
            "should launch a single node if all pods use the same PVC (the claim twice is one constraint)",
            index(
                vec![pvc("my-claim", Some("my-storage-class"), Some("my-volume"))],
                vec![zonal_pv("my-volume", &["test-zone-1"])],
                vec![class("my-storage-class", None, Some(&["test-zone-1"]))],
            ),
            with_claims(&["my-claim", "my-claim"]),
            vec!["topology.kubernetes.io/zone In [test-zone-1]"],
        ),
        (
            "should not fail for NFS volumes",
            index(
                vec![pvc("my-claim", Some(""), Some("my-volume"))],
                vec![{
                    let mut v = zonal_pv("my-volume", &["test-zone-1"]);
                    v["spec"]["csi"] = Value::Null;
                    v["spec"]["nfs"] = json!({"server": "fake.server", "path": "/some/path"});
                    v
                }],
                vec![],
            ),
            with_claims(&["my-claim", "my-claim"]),
            vec!["topology.kubernetes.io/zone In [test-zone-1]"],
        ),
    ];
    for (name, index, pod, expected) in cases {
        let got = index
            .pending(&pod)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(shown(&got), expected, "{name}");
    }
}

#[test]
fn hostile_volumes_are_bounded_and_never_panic() {
    // Forty volumes of three alternatives each: a cross product of 3^40, cut at MAX_ALTERNATIVES.
    let terms = |i: usize| {
        json!([{"matchExpressions": [{"key": format!("k{i}"), "operator": "In", "values": ["a"]}]},
               {"matchExpressions": [{"key": format!("k{i}"), "operator": "In", "values": ["b"]}]},
               {"matchExpressions": [{"key": format!("k{i}"), "operator": "In", "values": ["c"]}]}])
    };
    let names: Vec<String> = (0..40).map(|i| format!("c{i}")).collect();
    let many = index(
        names
            .iter()
            .enumerate()
            .map(|(i, n)| pvc(n, None, Some(&format!("v{i}"))))
            .collect(),
        (0..40).map(|i| pv(&format!("v{i}"), terms(i))).collect(),
        vec![],
    );
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let alternatives = many.pending(&with_claims(&refs)).expect("accepted");
    assert_eq!(alternatives.len(), MAX_ALTERNATIVES);
    assert!(alternatives.iter().all(|a| a.len() == 40));

    // An operator the apiserver would refuse is a refusal, not a panic.
    let odd = index(
        vec![pvc("data", None, Some("vol"))],
        vec![pv(
            "vol",
            json!([{"matchExpressions": [{"key": ZONE, "operator": "Near", "values": ["x"]}]}]),
        )],
        vec![],
    );
    let error = odd.pending(&with_claims(&["data"])).expect_err("refused");
    assert_eq!(error.metric_label(), "volume_affinity", "{error}");

    // Odd shapes: no spec, an ephemeral volume without a template, a pod without a name, unicode names.
    let bare = VolumeIndex::empty();
    assert!(bare
        .pending(&serde_json::from_value(json!({"metadata": {}})).expect("pod"))
        .expect("nothing to check")
        .is_empty());
    let no_template = pod(json!({"volumes": [{"name": "data", "ephemeral": {}}]}));
    assert_eq!(
        bare.pending(&no_template).map_err(|e| e.to_string()),
        Err(
            "getting persistent volume claim, persistentvolumeclaims \"p-data\" not found"
                .to_owned()
        )
    );
    let unicode = index(
        vec![pvc("dätä-☃", Some("ünïcode"), None)],
        vec![],
        vec![class("ünïcode", WFFC, Some(&["zöne-☃"]))],
    );
    assert_eq!(
        shown(
            &unicode
                .pending(&with_claims(&["dätä-☃"]))
                .expect("accepted")
        ),
        ["topology.kubernetes.io/zone In [zöne-☃]"]
    );
    let unnamed = VolumeIndex::from_objects(
        [object::<PersistentVolumeClaim>(json!({"metadata": {}}))],
        [object::<PersistentVolume>(json!({"metadata": {}}))],
        [object::<StorageClass>(
            json!({"metadata": {}, "provisioner": ""}),
        )],
    );
    assert!(unnamed.is_empty());
}

// ---- the solve ---------------------------------------------------------------------------------------------

/// One on-demand type in three zones, as Karpenter's fake cloud has them.
fn zones_catalog() -> Catalog {
    let offerings: Vec<Value> = ["test-zone-1", "test-zone-2", "test-zone-3"]
        .iter()
        .map(|z| json!({"zone": z, "capacityType": "on-demand", "price": 0.1, "available": true}))
        .collect();
    Catalog::from_instance_types_json(
        &json!({"instanceTypes": [{"name": "small", "cpu": "4", "memory": "8Gi", "pods": 20, "arch": "amd64",
            "os": ["linux"], "labels": {}, "overhead": {"cpu": "100m", "memory": "100Mi"}, "offerings": offerings}]})
        .to_string(),
    )
    .expect("catalog")
}

fn nodepool() -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}
    }))
    .expect("nodepool")
}

/// The pods planned with their volumes' requirements applied.
fn plan(volumes: &VolumeIndex, pods: &[Pod]) -> Plan {
    let infos: Vec<PodInfo> = pods
        .iter()
        .map(|p| {
            let mut info = PodInfo::from_pod(p).expect("pod info");
            apply(&mut info, &volumes.pending(p).expect("volumes accepted"));
            info
        })
        .collect();
    solve(&infos, &[nodepool()], &zones_catalog())
}

/// The zone each planned claim launches in.
fn zones(plan: &Plan) -> Vec<String> {
    plan.claims
        .iter()
        .map(|c| {
            c.cheapest
                .as_ref()
                .map(|c| c.zone.clone())
                .unwrap_or_default()
        })
        .collect()
}

fn zone_terms(terms: Value) -> Value {
    json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
}

fn with(pod: Pod, spec: Value) -> Pod {
    let mut value = serde_json::to_value(pod).expect("pod");
    if let (Some(base), Value::Object(extra)) = (value["spec"].as_object_mut(), spec) {
        base.extend(extra);
    }
    serde_json::from_value(value).expect("pod")
}

#[test]
fn the_solve_puts_the_node_where_the_volume_is() {
    let wffc = || class("wffc", WFFC, Some(&["test-zone-2", "test-zone-3"]));
    let in_zones = |zones: &[&str]| {
        zone_terms(
            json!([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": zones}]}]),
        )
    };

    // "should schedule to storage class zones if volume does not exist"
    let sc_index = index(vec![pvc("data", Some("wffc"), None)], vec![], vec![wffc()]);
    let placed = plan(
        &sc_index,
        &[with(
            with_claims(&["data"]),
            in_zones(&["test-zone-1", "test-zone-3"]),
        )],
    );
    assert_eq!(zones(&placed), ["test-zone-3"], "{placed:?}");

    // "should not schedule if storage class zones are incompatible"
    let refused = plan(
        &sc_index,
        &[with(with_claims(&["data"]), in_zones(&["test-zone-1"]))],
    );
    assert!(
        refused.claims.is_empty() && refused.unschedulable.len() == 1,
        "{refused:?}"
    );

    // "should schedule to volume zones if volume already bound"
    let pv_index = index(
        vec![pvc("data", Some("wffc"), Some("vol"))],
        vec![zonal_pv("vol", &["test-zone-3"])],
        vec![wffc()],
    );
    assert_eq!(
        zones(&plan(&pv_index, &[with_claims(&["data"])])),
        ["test-zone-3"]
    );

    // "should not schedule if volume zones are incompatible"
    let refused = plan(
        &pv_index,
        &[with(with_claims(&["data"]), in_zones(&["test-zone-1"]))],
    );
    assert!(refused.claims.is_empty(), "{refused:?}");
    assert!(
        refused.unschedulable[0]
            .reason
            .contains("topology.kubernetes.io/zone"),
        "{}",
        refused.unschedulable[0].reason
    );

    // "should not relax an added volume topology zone node-selector away": the first term cannot be met and is
    // relaxed, the second still carries the volume's zone.
    let relaxed = with(
        with_claims(&["data"]),
        zone_terms(json!([
            {"matchExpressions": [{"key": "example.com/label", "operator": "In", "values": ["unsupported"]}]},
            {"matchExpressions": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}])),
    );
    assert_eq!(zones(&plan(&pv_index, &[relaxed])), ["test-zone-3"]);

    // "should schedule pods using a PV with multiple zones": two pods, each with its own volume in zone 1 or 2,
    // and zonal anti-affinity: one node in each of the two zones.
    let multi_terms = json!([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1"]}]},
                             {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-2"]}]}]);
    let multi = index(
        vec![pvc("c0", None, Some("v0")), pvc("c1", None, Some("v1"))],
        vec![pv("v0", multi_terms.clone()), pv("v1", multi_terms)],
        vec![],
    );
    let anti = |name: &str, claim: &str| {
        let mut value = serde_json::to_value(with(
            with_claims(&[claim]),
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "multi-zone-app"}}, "topologyKey": ZONE}]}}}),
        ))
        .expect("pod");
        value["metadata"] = json!({"name": name, "namespace": "default", "uid": name,
                                   "labels": {"app": "multi-zone-app"}});
        serde_json::from_value::<Pod>(value).expect("pod")
    };
    let mut spread = zones(&plan(&multi, &[anti("pod-0", "c0"), anti("pod-1", "c1")]));
    spread.sort();
    assert_eq!(spread, ["test-zone-1", "test-zone-2"]);

    // "should ignore hostname affinity scheduling when using local path volumes"
    let mut local = pv(
        "vol",
        json!([{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gone"]}]}]),
    );
    local["spec"]["csi"] = Value::Null;
    local["spec"]["local"] = json!({"path": "/mnt/local-disks"});
    let local_index = index(
        vec![pvc("data", Some("local-path"), Some("vol"))],
        vec![local],
        vec![],
    );
    let placed = plan(&local_index, &[with_claims(&["data"])]);
    assert_eq!(placed.claims.len(), 1, "{placed:?}");
}

#[test]
fn applied_alternatives_leave_the_pods_own_requirements_alone() {
    let spec = zone_terms(json!([
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]},
        {"matchExpressions": [{"key": "b", "operator": "In", "values": ["2"]}]}]));
    let pod = with(pod(json!({})), spec);
    let base = PodInfo::from_pod(&pod).expect("pod info");
    let alternatives: Vec<Requirements> = vec![
        std::iter::once(Requirement::one_of(ZONE, ["z1"])).collect(),
        std::iter::once(Requirement::one_of(ZONE, ["z2"])).collect(),
    ];
    let mut info = base.clone();
    apply(&mut info, &alternatives);
    // The alternatives stay apart (a node takes one zone of them, not their union); the requirement sets the pod
    // is tried with and its strict requirements are unchanged.
    assert_eq!(info.volume_alternatives, alternatives);
    assert_eq!(info.variants, base.variants);
    assert_eq!(info.strict, base.strict);
    assert_eq!(info.required_terms, base.required_terms);

    // Nothing to apply, or only empty alternatives: the pod has none.
    let mut info = base.clone();
    apply(&mut info, &[]);
    assert!(info.volume_alternatives.is_empty());
    apply(&mut info, &[Requirements::new()]);
    assert!(info.volume_alternatives.is_empty());
}

/// Karpenter tries a pod's volume alternatives node by node (`ExistingNode.CanAdd`, `NodeClaim.CanAdd`): a volume
/// usable in z1 or z2 goes onto an existing node in z2 rather than a new node in z1.
#[test]
fn each_node_is_tried_with_each_volume_alternative() {
    let volume = pv(
        "vol",
        json!([{"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-1"]}]},
               {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["test-zone-2"]}]}]),
    );
    let index = index(
        vec![pvc("data", Some("gp3"), Some("vol"))],
        vec![volume],
        vec![],
    );
    let node: k8s_openapi::api::core::v1::Node =
        serde_json::from_value(json!({"metadata": {"name": "z2-node", "labels": {
            "kubernetes.io/hostname": "z2-node", ZONE: "test-zone-2", "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux", "karpenter.sh/capacity-type": "on-demand"}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"}}}))
        .expect("node");
    let pod = with_claims(&["data"]);
    let mut info = PodInfo::from_pod(&pod).expect("pod info");
    apply(&mut info, &index.pending(&pod).expect("volumes"));
    let catalog = zones_catalog();
    let cluster = crate::scheduling::Cluster::from_objects(
        std::slice::from_ref(&node),
        &[] as &[crate::api::nodeclaim::NodeClaim],
        &[],
        &[] as &[Pod],
        &catalog,
    )
    .expect("cluster");
    let plan = crate::scheduling::Scheduler::new(&[nodepool()], &catalog)
        .solve_on(std::slice::from_ref(&info), &cluster.nodes);
    assert_eq!(plan.existing.len(), 1, "{plan:?}");
    assert!(plan.claims.is_empty(), "{plan:?}");
}

/// "should schedule pod with PVC and TSC minDomains=3 when pods are spread across 3 zones" (topology_test.go):
/// the volume's zone narrows the node only, not the domains the spread counts over (the pod's strict
/// requirements), or the one zone left would read as fewer domains than `minDomains` and the pod be refused.
#[test]
fn a_zonal_volume_does_not_shrink_the_domains_a_spread_counts() {
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "minDomains": 3, "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "test"}}}]});
    let labelled = |name: &str, pod: Pod| {
        let mut value = serde_json::to_value(with(pod, spread.clone())).expect("pod");
        value["metadata"] =
            json!({"name": name, "namespace": "default", "uid": name, "labels": {"app": "test"}});
        serde_json::from_value::<Pod>(value).expect("pod")
    };
    let volumes = index(
        vec![pvc("test-pvc", None, Some("test-pv"))],
        vec![zonal_pv("test-pv", &["test-zone-1"])],
        vec![],
    );
    let pods = [
        labelled("a", pod(json!({}))),
        labelled("b", pod(json!({}))),
        labelled("c", pod(json!({}))),
        labelled("with-pvc", with_claims(&["test-pvc"])),
    ];
    let placed = plan(&volumes, &pods);
    assert!(
        placed.unschedulable.is_empty(),
        "{:?}",
        placed.unschedulable
    );
    let with_pvc = placed
        .claims
        .iter()
        .find(|c| c.pods.iter().any(|p| p == "default/with-pvc"))
        .expect("placed");
    assert_eq!(
        with_pvc.cheapest.as_ref().map(|c| c.zone.as_str()),
        Some("test-zone-1")
    );
}
