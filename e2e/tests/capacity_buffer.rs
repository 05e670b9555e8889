//! CapacityBuffers on the real control plane, moto and the stand-in kubelet (`--feature-gates=CapacityBuffer=true`;
//! Karpenter's capacitybuffer suite and its provisioner's buffer status): a buffer of two 1-CPU chunks from a
//! PodTemplate launches a node with no pod on it, reports `ReadyForProvisioning` and then `Provisioning=True`
//! (`FitsExistingCapacity`) once the node is there, and consolidation keeps the node (its virtual pods have nowhere
//! else to go), saying so in an `Unconsolidatable` Event instead of deleting it as empty.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kerf::api::capacitybuffer::CapacityBuffer;
use kerf_e2e::controller::{events_with_reason, node_claims};
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::Api;
use serde_json::json;

/// The condition `type_` of `buffer` as (status, reason).
fn condition(buffer: &CapacityBuffer, type_: &str) -> Option<(String, String)> {
    let conditions = buffer.status.as_ref()?.conditions.as_deref()?;
    kerf::api::condition::get(conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn a_buffer_launches_headroom_and_keeps_it() -> Result<()> {
    let flags = vec!["--feature-gates=CapacityBuffer=true".to_owned()];
    let Some(bed) = Testbed::start_or_skip_with("capacity_buffer", |_| flags).await? else {
        return Ok(());
    };
    let cluster = &bed.cluster;
    let log = || tail(&bed.log(), 40);
    apply_ok(
        cluster,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "headroom"},
            "spec": {
                "template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.xlarge"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                    ]
                }},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"}
            }
        }),
    )
    .await?;
    let namespace = cluster.create_namespace("buffer").await?;
    apply_ok(
        cluster,
        &json!({
            "apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": "chunk", "namespace": namespace},
            "template": {"metadata": {"labels": {"app": "burst"}},
                         "spec": {"containers": [{"name": "c", "image": "pause",
                                  "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
        }),
    )
    .await?;
    apply_ok(
        cluster,
        &json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "burst", "namespace": namespace},
            "spec": {"podTemplateRef": {"name": "chunk"}, "replicas": 2}
        }),
    )
    .await?;

    let claim = poll(
        "a NodeClaim launched for the buffer",
        Duration::from_secs(120),
        || async move {
            let claims = node_claims(cluster).await?;
            Ok(claims.into_iter().find(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_deref())
                    .is_some_and(|c| kerf::api::condition::is_true(c, "Initialized"))
            }))
        },
    )
    .await
    .with_context(log)?;
    let claim_name = claim.metadata.name.clone().unwrap_or_default();

    let buffers: Api<CapacityBuffer> = Api::namespaced(cluster.client()?, &namespace);
    let buffers = &buffers;
    poll(
        "the buffer ready, with its replicas, fitting existing capacity",
        Duration::from_secs(90),
        || async move {
            let buffer = buffers.get("burst").await?;
            let status = buffer.status.clone().unwrap_or_default();
            let done = condition(&buffer, "ReadyForProvisioning")
                == Some(("True".into(), "Resolved".into()))
                && status.replicas == Some(2)
                && status.pod_template_ref.as_ref().map(|r| r.name.as_str()) == Some("chunk")
                && status.provisioning_strategy.as_deref()
                    == Some("buffer.x-k8s.io/active-capacity")
                && condition(&buffer, "Provisioning")
                    == Some(("True".into(), "FitsExistingCapacity".into()));
            Ok(done.then_some(()))
        },
    )
    .await
    .with_context(log)?;

    // Disruption looks at the node (consolidateAfter 0s) and keeps it: it is not empty, and its virtual pods
    // fit no cheaper node.
    let claim_ref = &claim_name;
    poll(
        "an Unconsolidatable Event on the buffer's claim",
        Duration::from_secs(90),
        || async move {
            let events = events_with_reason(cluster, "Unconsolidatable").await?;
            Ok(events
                .iter()
                .any(|e| e.involved_object.name.as_deref() == Some(claim_ref.as_str()))
                .then_some(()))
        },
    )
    .await
    .with_context(log)?;
    let claims = node_claims(cluster).await?;
    ensure!(
        claims.len() == 1
            && claims[0].metadata.name.as_deref() == Some(claim_name.as_str())
            && claims[0].metadata.deletion_timestamp.is_none(),
        "the buffer's node was disrupted: {:?}\n{}",
        claims.iter().map(|c| &c.metadata.name).collect::<Vec<_>>(),
        log()
    );
    // No virtual pod became a real object.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.client()?, &namespace);
    ensure!(
        pods.list(&Default::default()).await?.items.is_empty(),
        "virtual pods were created"
    );
    Ok(())
}
