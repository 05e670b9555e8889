//! Termination on the real control plane and moto (issue 5, test 3): deleting a NodeClaim taints its Node,
//! evicts its pods through the policy/v1beta1 eviction API, where a PodDisruptionBudget with maxUnavailable 0
//! holds the drain until it is relaxed; then the instance is terminated, the Node deleted and the claim's
//! finalizer removed. Deleting a kerf Node deletes its claim, which goes the same way.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kerf::api::nodeclaim::NodeClaim;
use kerf::cloud::{CloudError, CloudProvider};
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_node_claim, apply_ok, tail, Testbed};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const APP: &str = "held-by-pdb";

/// A ReplicaSet of one pod that tolerates the claim's taint, so that the real scheduler binds it to the
/// claim's Node; and a PDB over it with maxUnavailable 0.
async fn workload(bed: &Testbed, namespace: &str) -> Result<()> {
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": APP, "namespace": namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": APP}},
                "template": {
                    "metadata": {"labels": {"app": APP}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "e2e",
                                         "effect": "NoSchedule"}],
                        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.9"}],
                    },
                },
            },
        }),
    )
    .await?;
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
            "metadata": {"name": APP, "namespace": namespace},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": APP}}},
        }),
    )
    .await
}

/// There is no kubelet to run the pod: report it Running and Ready as one would (1.20 checks PDBs only for
/// Running pods, and the disruption controller counts only Ready ones).
async fn mark_running(pods: &Api<Pod>, name: &str) -> Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": "Running",
        "startTime": now,
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
    }});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

#[tokio::test]
async fn deleting_a_nodeclaim_drains_it_past_a_pdb_once_relaxed_and_terminates_its_instance(
) -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("deleting_a_nodeclaim_drains_it").await? else {
        return Ok(());
    };
    apply_node_claim(
        &bed.cluster,
        "drain-a",
        &["c5.large", "m5.large"],
        &["on-demand"],
    )
    .await?;
    let claim = bed
        .wait_for_conditions("drain-a", &["Initialized"], Duration::from_secs(120))
        .await?;
    let status = claim.status.context("status")?;
    let node_name = status.node_name.context("nodeName")?;
    let provider_id = status.provider_id.context("providerID")?;

    let namespace = bed.cluster.create_namespace("drain").await?;
    workload(&bed, &namespace).await?;
    let client = bed.cluster.client()?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let (pods_ref, node_ref) = (&pods, &node_name);
    let pod = poll(
        "the pod to be bound to the claim's Node",
        Duration::from_secs(60),
        || async move {
            let list = pods_ref.list(&ListParams::default()).await?;
            Ok(list
                .items
                .into_iter()
                .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(node_ref)))
        },
    )
    .await?;
    let pod_name = pod.metadata.name.clone().context("pod name")?;
    mark_running(&pods, &pod_name).await?;

    let claims: Api<NodeClaim> = Api::all(client.clone());
    claims.delete("drain-a", &DeleteParams::default()).await?;

    // The drain is held: kerf's eviction was refused (FailedDraining on the Node), the pod and the
    // instance are still there, and the Node is cordoned with karpenter.sh/disrupted.
    let events: Api<Event> = Api::all(client.clone());
    let events = &events;
    poll(
        "a FailedDraining Event on the Node",
        Duration::from_secs(60),
        || async move {
            let list = events.list(&ListParams::default()).await?;
            Ok(list
                .items
                .iter()
                .any(|e| {
                    e.reason.as_deref() == Some("FailedDraining")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref())
                            == Some(node_ref.as_str())
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| tail(&bed.log(), 30))?;
    ensure!(
        pods.get_opt(&pod_name).await?.is_some(),
        "the PDB holds the pod"
    );
    bed.cloud
        .get(&provider_id)
        .await
        .context("the instance still runs")?;
    ensure!(
        claims.get_opt("drain-a").await?.is_some(),
        "the claim waits for the drain"
    );
    let nodes: Api<Node> = Api::all(client.clone());
    let node = nodes.get(&node_name).await?;
    let tainted = node
        .spec
        .and_then(|s| s.taints)
        .unwrap_or_default()
        .iter()
        .any(|t| t.key == "karpenter.sh/disrupted" && t.effect == "NoSchedule");
    ensure!(tainted, "the Node has karpenter.sh/disrupted:NoSchedule");

    // Relaxed: the eviction goes through, the instance is terminated, the Node and the claim go.
    let pdbs = kube::Api::<kube::api::DynamicObject>::namespaced_with(
        client.clone(),
        &namespace,
        &kube::discovery::ApiResource {
            group: "policy".into(),
            version: "v1beta1".into(),
            api_version: "policy/v1beta1".into(),
            kind: "PodDisruptionBudget".into(),
            plural: "poddisruptionbudgets".into(),
        },
    );
    pdbs.patch(
        APP,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"maxUnavailable": 1}})),
    )
    .await?;
    let claims_ref = &claims;
    poll(
        "the NodeClaim to be gone",
        Duration::from_secs(120),
        || async move { Ok(claims_ref.get_opt("drain-a").await?.is_none().then_some(())) },
    )
    .await
    .with_context(|| tail(&bed.log(), 40))?;
    ensure!(
        pods.get_opt(&pod_name).await?.is_none(),
        "the pod was evicted"
    );
    match bed.cloud.get(&provider_id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the instance should be terminated, got {other:?}"),
    }
    ensure!(
        nodes.get_opt(&node_name).await?.is_none(),
        "the Node is deleted"
    );
    ensure!(
        bed.instances_of("drain-a").await?.is_empty(),
        "nothing left behind"
    );
    let log = bed.log();
    for message in ["drained node", "deleted node", "deleted nodeclaim"] {
        ensure!(
            log.contains(message),
            "log has {message:?}:\n{}",
            tail(&log, 30)
        );
    }
    Ok(())
}

#[tokio::test]
async fn deleting_a_kerf_node_deletes_its_claim_and_terminates_its_instance() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("deleting_a_kerf_node").await? else {
        return Ok(());
    };
    apply_node_claim(
        &bed.cluster,
        "node-a",
        &["c5.large", "m5.large"],
        &["on-demand"],
    )
    .await?;
    let claim = bed
        .wait_for_conditions("node-a", &["Initialized"], Duration::from_secs(120))
        .await?;
    let status = claim.status.context("status")?;
    let node_name = status.node_name.context("nodeName")?;
    let provider_id = status.provider_id.context("providerID")?;

    let client = bed.cluster.client()?;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.delete(&node_name, &DeleteParams::default()).await?;
    let claims: Api<NodeClaim> = Api::all(client);
    let (claims, nodes) = (&claims, &nodes);
    let node_ref = &node_name;
    poll(
        "the Node and its NodeClaim to be gone",
        Duration::from_secs(120),
        || async move {
            let claim_gone = claims.get_opt("node-a").await?.is_none();
            let node_gone = nodes.get_opt(node_ref).await?.is_none();
            Ok((claim_gone && node_gone).then_some(()))
        },
    )
    .await
    .with_context(|| tail(&bed.log(), 40))?;
    match bed.cloud.get(&provider_id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the instance should be terminated, got {other:?}"),
    }
    ensure!(
        bed.log().contains("node deleted; deleting its nodeclaim"),
        "{}",
        tail(&bed.log(), 30)
    );
    Ok(())
}
