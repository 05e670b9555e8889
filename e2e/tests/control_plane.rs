//! The real control plane comes up, serves kerf's CRDs, stores a NodePool, and its scheduler reports an
//! unschedulable pod. Skipped (with a message) when the control plane is not built, unless KERF_E2E=1.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kerf_e2e::{poll, repo_root, yaml_documents, Cluster, K8S_VERSION};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{json, Value};

/// True when every field of `want` is in `got` with the same value (`got` may have more, e.g. defaults).
fn contains(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| contains(gv, wv))),
        (Value::Array(g), Value::Array(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(gv, wv)| contains(gv, wv))
        }
        (Value::Number(g), Value::Number(w)) => g.as_f64() == w.as_f64(),
        _ => got == want,
    }
}

#[tokio::test]
async fn control_plane_serves_kerf_crds_and_schedules_pods() -> Result<()> {
    let Some(cluster) =
        Cluster::start_or_skip("control_plane_serves_kerf_crds_and_schedules_pods").await?
    else {
        return Ok(());
    };
    let client = cluster.client()?;

    // The apiserver is the one we built, and kubectl works with the harness's kubeconfig.
    let version = client.apiserver_version().await?;
    assert_eq!(version.git_version, K8S_VERSION);
    let out = cluster
        .kubectl_ok(&["get", "namespace", "default", "-o", "name"])
        .await?;
    assert_eq!(out.trim(), "namespace/default");

    // kerf's CRDs (Karpenter's three, NodeOverlay and CapacityBuffer) are accepted and become Established.
    let mut crds = cluster.install_crds().await?;
    crds.sort();
    assert_eq!(
        crds,
        [
            "capacitybuffers.autoscaling.x-k8s.io",
            "ec2nodeclasses.karpenter.k8s.aws",
            "nodeclaims.karpenter.sh",
            "nodeoverlays.karpenter.sh",
            "nodepools.karpenter.sh"
        ]
    );

    // The example NodePool (first document of examples/default.yaml) is stored and read back intact.
    let docs = yaml_documents(&repo_root().join("examples/default.yaml"))?;
    let example = docs
        .first()
        .context("examples/default.yaml is empty")?
        .clone();
    assert_eq!(example["kind"], "NodePool");
    let mut nodepool: DynamicObject = serde_json::from_value(example.clone())?;
    // A unique name, so that a cluster reused through KERF_E2E_CLUSTER can run this test again.
    let name = format!(
        "e2e-{}-{}",
        example["metadata"]["name"].as_str().unwrap_or("np"),
        std::process::id()
    );
    nodepool.metadata.name = Some(name.clone());
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"));
    let nodepools: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    nodepools
        .create(&PostParams::default(), &nodepool)
        .await
        .context("creating the example NodePool")?;
    let stored = nodepools.get(&name).await?;
    assert!(stored.metadata.uid.is_some());
    let stored_spec = &stored.data["spec"];
    assert!(
        contains(stored_spec, &example["spec"]),
        "stored NodePool spec differs from the example:\nstored:  {stored_spec}\nexample: {}",
        example["spec"]
    );

    // A pod with no node to go to: the real scheduler says PodScheduled=False, reason Unschedulable.
    let namespace = cluster.create_namespace("e2e-control-plane").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": { "name": "waits-for-a-node" },
        "spec": {
            "containers": [{
                "name": "app",
                "image": "registry.invalid/kerf/pause:3.2",
                "resources": { "requests": { "cpu": "1", "memory": "256Mi" } }
            }]
        }
    }))?;
    pods.create(&PostParams::default(), &pod)
        .await
        .context("creating the pod")?;
    let pods = &pods;
    let message = poll(
        "PodScheduled=False/Unschedulable on the pod",
        Duration::from_secs(60),
        || async move {
            let pod = pods.get("waits-for-a-node").await?;
            let conditions = pod.status.and_then(|s| s.conditions).unwrap_or_default();
            Ok(conditions
                .into_iter()
                .find(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some("Unschedulable")
                })
                .map(|c| c.message.unwrap_or_default()))
        },
    )
    .await?;
    ensure!(
        !message.is_empty(),
        "the Unschedulable condition has no message"
    );
    let pod = pods.get("waits-for-a-node").await?;
    assert_eq!(pod.spec.and_then(|s| s.node_name), None);

    // Clean up (matters only for a reused cluster).
    nodepools.delete(&name, &DeleteParams::default()).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client);
    namespaces
        .delete(&namespace, &DeleteParams::default())
        .await?;
    Ok(())
}
