//! Leader election between two `kerf controller` processes on the real control plane: one holds the Lease
//! and the other stands by (ready, warm); killing the leader hands the Lease over within 20 s and the new
//! leader provisions; a leader that loses its Lease exits non-zero so that its pod restarts clean.

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use kerf_e2e::aws::AwsEmu;
use kerf_e2e::controller::{self, create_inflate, node_claims, node_pool};
use kerf_e2e::{poll, Cluster};
use kube::api::{Api, PostParams};
use serde_json::json;
use std::time::{Duration, Instant};

const LEASE: &str = "kerf-leader-election";

async fn holder(leases: &Api<Lease>) -> Result<Option<String>> {
    Ok(leases
        .get_opt(LEASE)
        .await?
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity))
}

async fn wait_for_holder(leases: &Api<Lease>, identity: &str, timeout: Duration) -> Result<()> {
    poll(
        &format!("{identity} to hold the Lease"),
        timeout,
        || async move { Ok((holder(leases).await?.as_deref() == Some(identity)).then_some(())) },
    )
    .await
}

#[tokio::test]
async fn the_standby_takes_over_within_20_seconds_and_a_deposed_leader_exits() -> Result<()> {
    let test = "the_standby_takes_over_within_20_seconds_and_a_deposed_leader_exits";
    let Some(cluster) = Cluster::start_or_skip(test).await? else {
        return Ok(());
    };
    let Some(emu) = AwsEmu::shared_or_skip(test)? else {
        return Ok(());
    };
    let setup = controller::prepare(&cluster, &emu, "leader").await?;
    let (ok, stderr) = cluster.apply(&node_pool("general", json!(null))).await?;
    anyhow::ensure!(ok, "applying the NodePool: {stderr}");
    let leases: Api<Lease> = Api::namespaced(cluster.client()?, "default");

    let first = setup.start("kerf-a", &[]).await?;
    wait_for_holder(&leases, "kerf-a", Duration::from_secs(30)).await?;
    let mut second = setup.start("kerf-b", &[]).await?;
    let second_ref = &second;
    poll(
        "the standby to be ready",
        Duration::from_secs(60),
        || async move { Ok((second_ref.health("/readyz").await? == 200).then_some(())) },
    )
    .await?;
    assert_eq!(
        holder(&leases).await?.as_deref(),
        Some("kerf-a"),
        "the standby took a held Lease"
    );

    // SIGKILL: the Lease is not released, the standby must wait for it to expire.
    drop(first);
    let killed = Instant::now();
    wait_for_holder(&leases, "kerf-b", Duration::from_secs(30)).await?;
    let failover = killed.elapsed();
    assert!(
        failover <= Duration::from_secs(20),
        "failover took {failover:?}"
    );

    let namespace = cluster.create_namespace("inflate").await?;
    create_inflate(&cluster, &namespace, 2, "1", "1536Mi").await?;
    let cluster_ref = &cluster;
    poll(
        "the new leader to create a NodeClaim",
        Duration::from_secs(90),
        || async move { Ok((!node_claims(cluster_ref).await?.is_empty()).then_some(())) },
    )
    .await?;

    // Another identity takes the Lease: the deposed leader stops with an error.
    let mut lease = leases.get(LEASE).await?;
    let spec = lease.spec.as_mut().context("a Lease spec")?;
    spec.holder_identity = Some("intruder".to_owned());
    spec.lease_duration_seconds = Some(3600);
    leases
        .replace(LEASE, &PostParams::default(), &lease)
        .await?;
    let second_ref = &mut second;
    let status = poll(
        "the deposed leader to exit",
        Duration::from_secs(30),
        || {
            let exited = second_ref.process.try_wait();
            async move { Ok(exited?) }
        },
    )
    .await?;
    assert!(!status.success(), "exited with {status}");
    Ok(())
}
