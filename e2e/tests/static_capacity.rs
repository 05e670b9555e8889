//! Static capacity on the real control plane, moto and the stand-in kubelet (`--feature-gates=StaticCapacity=true`;
//! Karpenter's static provisioning, deprovisioning and static drift suites): a NodePool with `replicas: 3` gets three
//! nodes without a single pod, a deleted node is made again, a template change replaces every node one for one, and
//! lowering `replicas` removes the surplus.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kerf::api::nodeclaim::NodeClaim;
use kerf_e2e::controller::node_claims;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

fn name(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

fn initialized(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .is_some_and(|c| kerf::api::condition::is_true(c, "Initialized"))
}

#[tokio::test]
async fn a_static_pool_keeps_its_replicas_through_a_deletion_and_a_template_change() -> Result<()> {
    let flags = vec!["--feature-gates=StaticCapacity=true".to_owned()];
    let Some(bed) = Testbed::start_or_skip_with("static_capacity", |_| flags).await? else {
        return Ok(());
    };
    let log = || tail(&bed.log(), 40);
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": "fixed"},
            "spec": {
                "replicas": 3,
                "template": {
                    "metadata": {"labels": {"team": "a"}},
                    "spec": {
                        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                        "requirements": [
                            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"]},
                            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
                        ]
                    }
                },
                "disruption": {"budgets": [{"nodes": "1"}]}
            }
        }),
    )
    .await?;
    let cluster = &bed.cluster;
    // The claims not being deleted, once there are `count` of them, all Initialized, none of `not`.
    let settled = |count: usize, not: BTreeSet<String>| async move {
        let claims = node_claims(cluster).await?;
        let alive: Vec<&NodeClaim> = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .collect();
        ensure!(
            alive.len() <= count + 1,
            "at most one claim beyond the replicas while replacing: {:?}",
            alive.iter().map(|c| name(c)).collect::<Vec<_>>()
        );
        let names: BTreeSet<String> = alive.iter().map(|c| name(c)).collect();
        let done =
            alive.len() == count && alive.iter().all(|c| initialized(c)) && names.is_disjoint(&not);
        Ok(done.then_some(names))
    };
    let first = poll(
        "three Initialized claims with no pods",
        Duration::from_secs(180),
        || settled(3, BTreeSet::new()),
    )
    .await
    .with_context(log)?;

    let gone = first.iter().next().context("a claim")?.clone();
    let claims: Api<NodeClaim> = Api::all(bed.cluster.client()?);
    claims.delete(&gone, &DeleteParams::default()).await?;
    let second = poll(
        "three Initialized claims again, the deleted one made anew",
        Duration::from_secs(180),
        || settled(3, BTreeSet::from([gone.clone()])),
    )
    .await
    .with_context(log)?;
    ensure!(
        second.difference(&first).count() == 1,
        "one new claim: {first:?} → {second:?}"
    );

    let pools: Api<kerf::api::nodepool::NodePool> = Api::all(bed.cluster.client()?);
    let team_b = json!({"spec": {"template": {"metadata": {"labels": {"team": "b"}}}}});
    pools
        .patch("fixed", &PatchParams::default(), &Patch::Merge(&team_b))
        .await?;
    let third = poll(
        "every node replaced after the template change, one at a time",
        Duration::from_secs(360),
        || settled(3, second.clone()),
    )
    .await
    .with_context(log)?;
    // Static drift: each drifted node was replaced (a replacement launched first), not deleted and made again.
    let replaced = bed
        .log()
        .lines()
        .filter(|l| {
            l.contains("disrupting node(s)")
                && l.contains("\"decision\":\"replace\"")
                && l.contains("Drifted")
        })
        .count();
    ensure!(
        replaced == 3,
        "three drift replacements, {replaced} logged:\n{}",
        log()
    );
    for claim in node_claims(&bed.cluster).await? {
        if third.contains(&name(&claim)) {
            let team = claim.metadata.labels.as_ref().and_then(|l| l.get("team"));
            ensure!(
                team.map(String::as_str) == Some("b"),
                "{}: {team:?}",
                name(&claim)
            );
        }
    }

    let one = json!({"spec": {"replicas": 1}});
    pools
        .patch("fixed", &PatchParams::default(), &Patch::Merge(&one))
        .await?;
    poll("the surplus removed", Duration::from_secs(180), || async {
        let claims = node_claims(&bed.cluster).await?;
        Ok((claims.len() == 1).then_some(()))
    })
    .await
    .with_context(log)?;
    ensure!(
        bed.log()
            .contains("provisioning nodeclaims to satisfy replica count")
            && bed
                .log()
                .contains("deprovisioning nodeclaims to satisfy replica count"),
        "{}",
        log()
    );
    Ok(())
}
