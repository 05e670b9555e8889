//! ARC zonal shifts on the real control plane, moto and the stand-in kubelet (`--enable-zonal-shift`; Karpenter's
//! AWS `arczonalshift` controller and provider suites): the controller checks at start that ARC knows the EKS
//! cluster, and refuses to start when it does not; a shift away from a zone puts a `ZonalShiftActive` Warning on
//! the NodePool, new nodes go to the other zone, a NodeClaim deleted in the shifted zone keeps its instance (no
//! TerminateInstances into the impaired zone); when the shift ends a `ZonalShiftCleared` Event follows and the
//! instance is terminated.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kerf::api::nodeclaim::NodeClaim;
use kerf::cloud::{CloudError, CloudProvider};
use kerf_e2e::aws::{unique_cluster_name, AwsEmu, REGION};
use kerf_e2e::controller::{node_claims, wait_for_event, ExpectedEvent};
use kerf_e2e::kerf::kerf_binary;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::{Api, DeleteParams};
use serde_json::json;

const POOL: &str = "zonal";

/// The zone label of `claim`.
fn zone(claim: &NodeClaim) -> Option<&str> {
    claim
        .metadata
        .labels
        .as_ref()?
        .get("topology.kubernetes.io/zone")
        .map(String::as_str)
}

/// Waits for a NodeClaim `wanted` takes that has an instance (a provider ID).
async fn launched_claim(
    cluster: &kerf_e2e::Cluster,
    what: &str,
    wanted: impl Fn(&NodeClaim) -> bool,
) -> Result<NodeClaim> {
    let wanted = &wanted;
    poll(what, Duration::from_secs(120), || async move {
        let claims = node_claims(cluster).await?;
        Ok(claims.into_iter().find(|c| {
            wanted(c)
                && c.status
                    .as_ref()
                    .and_then(|s| s.provider_id.as_ref())
                    .is_some()
        }))
    })
    .await
}

/// The Event Karpenter's zonal shift controller puts on the NodePool when a shift away from us-west-2a (zone ID
/// `zone_id`) begins or ends, in its words.
fn shift_event(zone_id: &str, begins: bool) -> ExpectedEvent<'static> {
    let (reason, type_, said) = if begins {
        (
            "ZonalShiftActive",
            "Warning",
            "Zonal shift detected: offerings in zone us-west-2a ({}) are unavailable",
        )
    } else {
        (
            "ZonalShiftCleared",
            "Normal",
            "Zonal shift cleared: offerings in zone us-west-2a ({}) are restored",
        )
    };
    ExpectedEvent {
        involved: POOL,
        reason,
        type_,
        message: format!("{} for this NodePool", said.replace("{}", zone_id)),
    }
}

#[tokio::test]
async fn a_zonal_shift_keeps_launches_and_terminations_out_of_the_zone() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip_prepared("zonal_shift", async |emu, _, name| {
        // The controller finds the cluster's ARN through EKS and asks ARC about it at start.
        emu.create_eks_cluster(name).await?;
        Ok(vec!["--enable-zonal-shift".to_owned(), "true".to_owned()])
    })
    .await?
    else {
        return Ok(());
    };
    let cluster = &bed.cluster;
    let log = || tail(&bed.log(), 60);
    let arn = format!("arn:aws:eks:{REGION}:123456789012:cluster/{}", bed.name);
    let zones = bed
        .cloud
        .ec2()
        .describe_availability_zones()
        .zone_names("us-west-2a")
        .send()
        .await?;
    let zone_id = zones
        .availability_zones()
        .first()
        .and_then(|z| z.zone_id())
        .context("moto gives us-west-2a a zone ID")?
        .to_owned();

    apply_ok(
        cluster,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": POOL},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "m5.large"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a", "us-west-2b"]}
                ]
            }}}
        }),
    )
    .await?;
    let namespace = cluster.create_namespace("zonal").await?;
    let pod = |name: &str, zone: Option<&str>| {
        // No grace period: with no kubelet to end it, an evicted pod would hold the drain until it counts as
        // stuck terminating (its grace plus a minute).
        let mut spec = json!({"terminationGracePeriodSeconds": 0,
                              "containers": [{"name": "c", "image": "pause",
                              "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
        if let Some(zone) = zone {
            spec["nodeSelector"] = json!({"topology.kubernetes.io/zone": zone});
        }
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    };

    // Before the shift: a node in us-west-2a.
    apply_ok(cluster, &pod("in-a", Some("us-west-2a"))).await?;
    let in_a = launched_claim(cluster, "a NodeClaim launched in us-west-2a", |c| {
        zone(c) == Some("us-west-2a")
    })
    .await
    .with_context(log)?;
    let in_a_name = in_a.metadata.name.clone().unwrap_or_default();
    let provider_id = in_a
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap_or_default();

    // The shift: the NodePool hears of it.
    bed.emu
        .set_zonal_shifts(&arn, &json!([{"awayFrom": zone_id}]))
        .await?;
    wait_for_event(
        cluster,
        &shift_event(&zone_id, true),
        Duration::from_secs(90),
    )
    .await
    .with_context(log)?;

    // A pod that may go anywhere gets a node in the zone left (one CPU more does not fit the first node).
    apply_ok(cluster, &pod("anywhere", None)).await?;
    let second = launched_claim(cluster, "a second NodeClaim", |c| {
        c.metadata.name.as_ref() != Some(&in_a_name) && zone(c).is_some()
    })
    .await
    .with_context(log)?;
    ensure!(
        zone(&second) == Some("us-west-2b"),
        "the shifted zone must not be launched into: {:?}\n{}",
        second.metadata.labels,
        log()
    );

    // The claim in the shifted zone is deleted: its instance is left running while the shift lasts.
    let claims: Api<NodeClaim> = Api::all(cluster.client()?);
    claims.delete(&in_a_name, &DeleteParams::default()).await?;
    let refused = format!("is in zonally shifted availability zone us-west-2a ({zone_id})");
    let refused = &refused;
    let bed_ref = &bed;
    poll(
        "the termination refused in the shifted zone",
        Duration::from_secs(150),
        || async move { Ok(bed_ref.log().contains(refused.as_str()).then_some(())) },
    )
    .await
    .with_context(log)?;
    let instance = bed.cloud.get(&provider_id).await?;
    ensure!(
        !instance.state.is_gone(),
        "the instance in the shifted zone must not be terminated: {instance:?}"
    );

    // The shift ends: the NodePool hears of it, and the instance goes.
    bed.emu.set_zonal_shifts(&arn, &json!([])).await?;
    wait_for_event(
        cluster,
        &shift_event(&zone_id, false),
        Duration::from_secs(90),
    )
    .await
    .with_context(log)?;
    let claims = &claims;
    let in_a_name = &in_a_name;
    poll(
        "the deleted NodeClaim to be gone",
        Duration::from_secs(180),
        || async move { Ok(claims.get_opt(in_a_name).await?.is_none().then_some(())) },
    )
    .await
    .with_context(log)?;
    match bed.cloud.get(&provider_id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the instance should be terminated, got {other:?}"),
    }
    let calls = bed.emu.calls().await?;
    ensure!(
        calls.get("GetManagedResource").copied().unwrap_or(0) >= 3,
        "ARC asked at start and on each poll: {calls:?}"
    );
    Ok(())
}

/// A cluster ARC does not know (not registered with zonal shift, or not in EKS at all) stops the controller at
/// start with the flag named, as Karpenter's operator refuses to start.
#[tokio::test]
async fn a_cluster_unknown_to_zonal_shift_stops_the_controller() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("zonal_shift_unknown_cluster")? else {
        return Ok(());
    };
    let name = unique_cluster_name("noshift");
    let run = || {
        let output = tokio::process::Command::new(kerf_binary()?)
            .arg("controller")
            .args(["--cluster-name", &name])
            .args(["--cluster-endpoint", "https://127.0.0.1:1"])
            .args(["--kubernetes-version", kerf_e2e::aws::EKS_AMI_VERSION])
            .args(["--aws-region", REGION])
            .args(["--aws-endpoint-url", emu.endpoint()])
            .args(["--enable-zonal-shift", "true"])
            .args(["--leader-elect", "false"])
            .env("KUBECONFIG", "/nonexistent/kubeconfig")
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .output();
        anyhow::Ok(output)
    };
    // Not in EKS: DescribeCluster fails.
    let out = tokio::time::timeout(Duration::from_secs(120), run()?)
        .await
        .context("kerf controller did not stop")?
        .context("running kerf controller")?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "the controller must not start");
    ensure!(
        stderr.contains("--enable-zonal-shift (ENABLE_ZONAL_SHIFT): unable to find cluster"),
        "stderr: {stderr}"
    );
    Ok(())
}
