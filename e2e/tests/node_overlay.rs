//! NodeOverlays on the real control plane, moto and the stand-in kubelet (`--feature-gates=NodeOverlay=true`;
//! Karpenter's nodeoverlay suite): an overlay that makes m5.large cheaper than c5.large changes which type a pending
//! pod's node is launched as, the claim says so (`karpenter.sh/price-overlay-applied`), and an overlay of the same
//! weight that prices the same offerings is reported in conflict on its status while the other is Ready.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kerf::api::nodeoverlay::NodeOverlay;
use kerf_e2e::controller::node_claims;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::Api;
use serde_json::json;

/// The condition `type_` of `overlay` as (status, reason).
fn condition(overlay: &NodeOverlay, type_: &str) -> Option<(String, String)> {
    let conditions = overlay.status.as_ref()?.conditions.as_deref()?;
    kerf::api::condition::get(conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn a_price_overlay_changes_the_instance_type_launched() -> Result<()> {
    let flags = vec!["--feature-gates=NodeOverlay=true".to_owned()];
    let Some(bed) = Testbed::start_or_skip_with("node_overlay", |_| flags).await? else {
        return Ok(());
    };
    let cluster = &bed.cluster;
    let log = || tail(&bed.log(), 40);
    // Without overlays c5.large (0.085/h in the test prices) is cheaper than m5.large (0.096/h).
    for (name, price) in [("b-cheap-m5", "0.01"), ("a-same-weight", "0.02")] {
        apply_ok(
            cluster,
            &json!({
                "apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay",
                "metadata": {"name": name},
                "spec": {
                    "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]}],
                    "price": price
                }
            }),
        )
        .await?;
    }
    apply_ok(
        cluster,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "overlaid"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "m5.large"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                ]
            }}}
        }),
    )
    .await?;
    let namespace = cluster.create_namespace("overlay").await?;
    apply_ok(
        cluster,
        &json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "one", "namespace": namespace},
            "spec": {"containers": [{"name": "c", "image": "pause",
                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
        }),
    )
    .await?;

    let claim = poll(
        "a NodeClaim launched for the pod",
        Duration::from_secs(120),
        || async move {
            let claims = node_claims(cluster).await?;
            Ok(claims.into_iter().find(|c| {
                c.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("node.kubernetes.io/instance-type"))
            }))
        },
    )
    .await
    .with_context(log)?;
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    ensure!(
        labels
            .get("node.kubernetes.io/instance-type")
            .map(String::as_str)
            == Some("m5.large"),
        "the overlaid m5.large should be launched, not {labels:?}\n{}",
        log()
    );
    let annotations = claim.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        annotations
            .get("karpenter.sh/price-overlay-applied")
            .map(String::as_str)
            == Some("true"),
        "annotations: {annotations:?}"
    );

    let overlays: Api<NodeOverlay> = Api::all(cluster.client()?);
    let overlays = &overlays;
    poll(
        "the overlays' conditions",
        Duration::from_secs(60),
        || async move {
            let cheap = overlays.get("b-cheap-m5").await?;
            let same = overlays.get("a-same-weight").await?;
            let done = condition(&cheap, "ValidationSucceeded")
                == Some(("True".into(), "ValidationSucceeded".into()))
                && condition(&cheap, "Ready").is_some_and(|(s, _)| s == "True")
                && condition(&same, "ValidationSucceeded")
                    == Some(("False".into(), "Conflict".into()))
                && condition(&same, "Ready").is_some_and(|(s, _)| s == "False");
            Ok(done.then_some(()))
        },
    )
    .await
    .with_context(log)?;
    Ok(())
}
