//! Karpenter v1.14.1 `pkg/controllers/capacitybuffer/helpers_test.go`, `suite_test.go` and the provisioner's
//! buffer status, translated: each test names the upstream cases it covers.

use super::*;
use crate::api::capacitybuffer::CapacityBuffer;

fn spec(value: serde_json::Value) -> CapacityBufferSpec {
    serde_json::from_value(value).expect("spec")
}

fn pod_spec(containers: serde_json::Value, init: serde_json::Value) -> PodSpec {
    serde_json::from_value(json!({"containers": containers, "initContainers": init}))
        .expect("pod spec")
}

fn requesting(cpu: &str, memory: &str) -> PodSpec {
    pod_spec(
        json!([{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]),
        json!([]),
    )
}

// "should calculate replicas based on CPU limits", "... memory limits", "should take the minimum across multiple
// resources", "should floor divide (no rounding up)", "should handle millicore-level precision", "should return 0
// when limit is smaller than a single pod request", "should return false when no limit resources match pod
// requests", "should use init container max if larger than sum of containers".
#[test]
fn limits_give_the_chunks_that_fit() {
    let pod = requesting("500m", "1Gi");
    let limited =
        |limits: serde_json::Value| replicas(&spec(json!({"limits": limits})), &pod, None);
    assert_eq!(limited(json!({"cpu": "2"})), 4);
    assert_eq!(limited(json!({"memory": "3Gi"})), 3);
    assert_eq!(limited(json!({"cpu": "2", "memory": "3Gi"})), 3);
    assert_eq!(limited(json!({"cpu": "1900m"})), 3);
    assert_eq!(limited(json!({"cpu": "100m"})), 0);
    assert_eq!(
        limited(json!({"nvidia.com/gpu": "4"})),
        0,
        "nothing matched: no chunks"
    );
    let init_heavy = pod_spec(
        json!([{"name": "c", "resources": {"requests": {"cpu": "1"}}}]),
        json!([{"name": "i", "resources": {"requests": {"cpu": "3"}}}]),
    );
    assert_eq!(
        replicas(&spec(json!({"limits": {"cpu": "6"}})), &init_heavy, None),
        2
    );
}

// "should calculate percentage and ceil", "should ceil fractional results", "should return at least 1 when
// percentage > 0 and replicas > 0", "should return 0 when scalable has 0 replicas", "should handle large
// percentages (>100)", and computeReplicas: replicas and percentage take the larger, limits cap them.
#[test]
fn replicas_and_percentage_take_the_larger_and_limits_cap_them() {
    let pod = requesting("1", "1Gi");
    let count =
        |value: serde_json::Value, workload: Option<i32>| replicas(&spec(value), &pod, workload);
    assert_eq!(count(json!({"percentage": 20}), Some(10)), 2);
    assert_eq!(count(json!({"percentage": 25}), Some(10)), 3);
    assert_eq!(count(json!({"percentage": 1}), Some(3)), 1);
    assert_eq!(count(json!({"percentage": 50}), Some(0)), 0);
    assert_eq!(count(json!({"percentage": 250}), Some(4)), 10);
    assert_eq!(count(json!({"percentage": 20, "replicas": 5}), Some(10)), 5);
    assert_eq!(count(json!({"percentage": 80, "replicas": 5}), Some(10)), 8);
    assert_eq!(
        count(json!({"replicas": 5, "limits": {"cpu": "3"}}), None),
        3
    );
    assert_eq!(count(json!({"replicas": 2}), None), 2);
    assert_eq!(count(json!({}), None), 0);
}

// BuildVirtualPods / sanitizeVirtualPodSpec.
#[test]
fn virtual_pods_are_pending_placeholders_of_the_template() {
    let buffer: CapacityBuffer = serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
        "spec": {"podTemplateRef": {"name": "t"}, "replicas": 2}
    }))
    .expect("buffer");
    let template: PodTemplateSpec = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "web"}},
        "spec": {"nodeName": "somewhere", "containers": [{"name": "c",
                 "volumeMounts": [{"name": "data", "mountPath": "/d"}, {"name": "cfg", "mountPath": "/c"}]}],
                 "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "x"}},
                             {"name": "cfg", "configMap": {"name": "c"}}]}
    }))
    .expect("template");
    let pods = virtual_pods(&buffer, &template, 2);
    assert_eq!(pods.len(), 2);
    let pod = &pods[1];
    assert_eq!(pod.metadata.name.as_deref(), Some("capacity-buffer-web-2"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("prod"));
    assert_eq!(pod.metadata.uid.as_deref(), Some("u1-2"));
    assert!(is_virtual(pod));
    assert_eq!(buffer_of(pod).as_deref(), Some("prod/web"));
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.node_name, None);
    assert_eq!(spec.priority, Some(i32::MIN));
    let volumes: Vec<&str> = spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    assert_eq!(volumes, ["cfg"]);
    let mounts: Vec<&str> = spec.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(mounts, ["cfg"]);
    assert!(crate::engine::provisioning::pending::is_provisionable(pod));
    assert!(!is_virtual(&Pod::default()));
}

// computeProvisioningCondition.
#[test]
fn the_provisioning_condition_follows_where_the_pods_went() {
    assert_eq!(
        provisioning_condition(false, 3, None).map(|c| c.1),
        Some("NotReadyForProvisioning")
    );
    assert_eq!(
        provisioning_condition(true, 0, None).map(|c| c.1),
        Some("BufferEmpty")
    );
    assert_eq!(provisioning_condition(true, 3, None), None);
    let placed = |existing, new_capacity, failed| Placed {
        existing,
        new_capacity,
        failed,
    };
    assert_eq!(
        provisioning_condition(true, 3, Some(placed(1, 2, 0))),
        Some((
            false,
            "RequiresNewCapacity",
            "2/3 virtual pods required new capacity, 0 failed".to_owned()
        ))
    );
    assert_eq!(
        provisioning_condition(true, 3, Some(placed(3, 0, 0))),
        Some((
            true,
            "FitsExistingCapacity",
            "All 3 virtual pods fit on existing capacity".to_owned()
        ))
    );
}

fn buffer(spec: serde_json::Value) -> CapacityBuffer {
    serde_json::from_value(json!({
        "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
        "metadata": {"name": "b", "namespace": "prod"}, "spec": spec
    }))
    .expect("buffer")
}

// Karpenter's capacitybuffer suite: "should resolve a PodTemplate and set ReadyForProvisioning=True", "should set
// ReadyForProvisioning=False when PodTemplate is not found", "... when scalable ref is not found", "should return
// error for unsupported kind", "should return error for unsupported API group", "should default to 1 replica when
// workload has nil Spec.Replicas", "should resolve a Deployment and calculate percentage-based replicas".
#[test]
fn refs_resolve_as_karpenters_controller_does() {
    let template: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": "chunk", "namespace": "prod", "generation": 3},
        "template": {"spec": {"containers": [{"name": "c"}]}}
    }))
    .expect("template");
    let by_template = buffer(json!({"podTemplateRef": {"name": "chunk"}, "replicas": 2}));
    let resolved = resolve(&by_template, [&template], Ok(None)).expect("resolved");
    assert_eq!(resolved.pod_template, Some(("chunk".to_owned(), Some(3))));
    assert_eq!(pods_of(&by_template, &resolved).0, 2);
    let other_namespace = PodTemplate {
        metadata: ObjectMeta {
            namespace: Some("dev".into()),
            ..template.metadata.clone()
        },
        ..template.clone()
    };
    assert_eq!(
        resolve(&by_template, [&other_namespace], Ok(None)).map_err(|e| e.0),
        Err("PodTemplateNotFound")
    );
    let by_workload =
        buffer(json!({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": 50}));
    assert_eq!(workload_ref(&by_workload), Ok(Some(("Deployment", "web"))));
    let spec: PodTemplateSpec =
        serde_json::from_value(json!({"spec": {"containers": [{"name": "c"}]}})).expect("spec");
    let resolved = resolve(&by_workload, [], Ok(Some((spec.clone(), Some(10))))).expect("resolved");
    assert_eq!(pods_of(&by_workload, &resolved).0, 5);
    let unset = resolve(&by_workload, [], Ok(Some((spec, None)))).expect("resolved");
    assert_eq!(unset.scalable, Some(1));
    assert_eq!(
        resolve(&by_workload, [], Ok(None)).map_err(|e| e.0),
        Err("ScalableRefNotFound")
    );
    let job = buffer(json!({"scalableRef": {"kind": "Job", "name": "j"}, "replicas": 1}));
    assert_eq!(
        workload_ref(&job).map_err(|e| e.1),
        Err("unsupported kind \"Job\"".to_owned())
    );
    let other_group = buffer(
        json!({"scalableRef": {"apiGroup": "batch", "kind": "Deployment", "name": "d"}, "replicas": 1}),
    );
    assert!(workload_ref(&other_group).is_err());
    assert_eq!(
        workload_ref(&buffer(json!({}))).map_err(|e| e.0),
        Err("ResolutionFailed")
    );
}
