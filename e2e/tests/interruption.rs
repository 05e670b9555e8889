//! Interruption on the real control plane, moto's EC2 and SQS and the stand-in kubelet (issue 6): a spot
//! interruption warning for the node of the inflate pods makes `kerf controller` delete its NodeClaim, launch
//! the replacement while the old node still runs the pods, drain the old node onto it and terminate the
//! interrupted instance.
//!
//! A PodDisruptionBudget of `maxUnavailable: 1` paces the drain: a second pod is evicted only once the first
//! one's successor runs, and that needs the replacement. So the replacement has to be planned for the pods
//! still running on the old node — a provisioner that waited for evicted pods to turn pending would plan for
//! one pod at a time.
//!
//! Without a queue, EC2's status checks do the same: an instance whose instance check the emulator reports
//! impaired is terminated forcefully and its pod moves to a new node.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::{Node, Pod};
use kerf::api::nodeclaim::NodeClaim;
use kerf::cloud::{CloudError, CloudProvider};
use kerf_e2e::aws::spot_interruption;
use kerf_e2e::controller::{create_inflate, events_with_reason, node_claims, node_pool};
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const TEST: &str = "a_spot_interruption_drains_and_replaces_the_node";
/// One m5.xlarge holds all of them (3 × 1 CPU of its ~3.9 allocatable).
const REPLICAS: usize = 3;

/// A NodePool of m5.xlarge on-demand nodes. Consolidation is off: this test is about interruption, and an
/// empty replacement must not be taken for an empty node before the pods reach it.
fn pool() -> serde_json::Value {
    let mut pool = node_pool("general", serde_json::Value::Null);
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.xlarge"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]);
    pool["spec"]["disruption"] = json!({"consolidateAfter": "Never"});
    pool
}

fn pdb(namespace: &str) -> serde_json::Value {
    json!({
        "apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "inflate", "namespace": namespace},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "inflate"}}},
    })
}

fn node_of(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref()?.node_name.as_deref()
}

fn is_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

fn is_initialized(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| kerf::api::condition::is_true(c, "Initialized"))
}

fn name(claim: &NodeClaim) -> String {
    claim.metadata.name.clone().unwrap_or_default()
}

/// The CPU (millicores) a claim requests.
fn requested_cpu(claim: &NodeClaim) -> i64 {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    let requests = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref());
    match requests.and_then(|r| r.get("cpu")) {
        Some(IntOrString::String(text)) => kerf::catalog::parse_quantity(text).unwrap_or(0),
        Some(IntOrString::Int(cores)) => i64::from(*cores) * 1000,
        None => 0,
    }
}

/// The inflate pods not being deleted. Plays the kubelet the stand-in does not: a pod bound to a Node is
/// reported Running and Ready (the disruption controller counts only Ready pods towards the PDB).
async fn inflate_pods(pods: &Api<Pod>) -> Result<Vec<Pod>> {
    let mut alive = Vec::new();
    for mut pod in pods.list(&ListParams::default()).await?.items {
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if node_of(&pod).is_some() && !is_running(&pod) {
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let status = json!({"status": {
                "phase": "Running",
                "startTime": now,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            }});
            let name = pod.metadata.name.clone().unwrap_or_default();
            pod = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
                .await?;
        }
        alive.push(pod);
    }
    Ok(alive)
}

#[tokio::test]
async fn a_spot_interruption_drains_and_replaces_the_node() -> Result<()> {
    let Some((bed, queue)) = Testbed::start_with_interruption_queue_or_skip(TEST).await? else {
        return Ok(());
    };
    let log = || tail(&bed.log(), 40);
    let client = bed.cluster.client()?;

    // The inflate pods Running on one Initialized node, under a PDB that lets one of them go at a time.
    apply_ok(&bed.cluster, &pool()).await?;
    let namespace = bed.cluster.create_namespace("inflate").await?;
    apply_ok(&bed.cluster, &pdb(&namespace)).await?;
    create_inflate(&bed.cluster, &namespace, REPLICAS as i32, "1", "512Mi").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let (cluster, pods_ref) = (&bed.cluster, &pods);
    let old = poll(
        "the inflate pods Running on one Initialized NodeClaim",
        Duration::from_secs(120),
        || async move {
            let claims = node_claims(cluster).await?;
            let running = inflate_pods(pods_ref).await?;
            let [claim] = claims.as_slice() else {
                return Ok(None);
            };
            let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
            let all_there = running.len() == REPLICAS
                && running
                    .iter()
                    .all(|p| is_running(p) && node_of(p) == node.as_deref());
            Ok((is_initialized(claim) && all_there).then(|| claim.clone()))
        },
    )
    .await
    .with_context(log)?;
    let old_name = name(&old);
    let old_status = old.status.clone().context("status")?;
    let old_node = old_status.node_name.context("nodeName")?;
    let old_provider_id = old_status.provider_id.context("providerID")?;
    let originals: BTreeSet<String> = inflate_pods(&pods)
        .await?
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();

    let instance_id = kerf::cloud::instance_id(&old_provider_id)?;
    queue.send(spot_interruption(instance_id)).await?;

    // The replacement comes while the old claim and its instance are still there, planned for the pods
    // still running on the old node: at least two of them, which the PDB keeps there until it is up.
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let (claims_ref, old_name_ref) = (&claims, &old_name);
    let replacement = poll(
        "a replacement NodeClaim",
        Duration::from_secs(60),
        || async move {
            let list = claims_ref.list(&ListParams::default()).await?.items;
            Ok(list.into_iter().find(|c| name(c) != *old_name_ref))
        },
    )
    .await
    .with_context(log)?;
    let old_now = claims
        .get_opt(&old_name)
        .await?
        .context("the old claim is gone already")?;
    ensure!(
        old_now.metadata.deletion_timestamp.is_some(),
        "the interrupted claim is being deleted"
    );
    bed.cloud
        .get(&old_provider_id)
        .await
        .context("the interrupted instance still runs when the replacement is created")?;
    let still_on_old = inflate_pods(&pods)
        .await?
        .iter()
        .filter(|p| node_of(p) == Some(old_node.as_str()))
        .filter(|p| {
            p.metadata
                .name
                .as_ref()
                .is_some_and(|n| originals.contains(n))
        })
        .count();
    ensure!(
        still_on_old >= REPLICAS - 1,
        "{still_on_old} original pods on the old node when the replacement was created"
    );
    ensure!(
        requested_cpu(&replacement) >= 2_000,
        "the replacement is for the pods still running on the old node, it requests {} m CPU",
        requested_cpu(&replacement)
    );
    let replacement_name = name(&replacement);
    let replacement = bed
        .wait_for_conditions(
            &replacement_name,
            &["Initialized"],
            Duration::from_secs(120),
        )
        .await?;
    let new_node = replacement
        .status
        .and_then(|s| s.node_name)
        .context("the replacement's nodeName")?;

    // The drain moves every pod over; then the old instance, Node and claim go.
    let nodes: Api<Node> = Api::all(client.clone());
    let (nodes_ref, old_node_ref, new_node_ref) = (&nodes, &old_node, &new_node);
    poll(
        "every inflate pod Running on the replacement and the old claim and Node gone",
        Duration::from_secs(120),
        || async move {
            let running = inflate_pods(pods_ref).await?;
            let moved = running.len() == REPLICAS
                && running
                    .iter()
                    .all(|p| is_running(p) && node_of(p) == Some(new_node_ref.as_str()));
            let claim_gone = claims_ref.get_opt(old_name_ref).await?.is_none();
            let node_gone = nodes_ref.get_opt(old_node_ref).await?.is_none();
            Ok((moved && claim_gone && node_gone).then_some(()))
        },
    )
    .await
    .with_context(log)?;
    match bed.cloud.get(&old_provider_id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the interrupted instance should be terminated, got {other:?}"),
    }
    let left: Vec<String> = node_claims(&bed.cluster).await?.iter().map(name).collect();
    ensure!(
        left == [replacement_name.clone()],
        "one replacement, no second launch: {left:?}"
    );
    // On the NodeClaim and on its Node (Karpenter publishes interruption Events on both).
    let interrupted = events_with_reason(&bed.cluster, "SpotInterrupted").await?;
    let kinds: Vec<(&str, &str)> = interrupted
        .iter()
        .filter_map(|e| {
            Some((
                e.involved_object.kind.as_deref()?,
                e.involved_object.name.as_deref()?,
            ))
        })
        .collect();
    ensure!(
        kinds.contains(&("NodeClaim", old_name.as_str()))
            && kinds.contains(&("Node", old_node.as_str())),
        "a SpotInterrupted Event on the claim {old_name} and the Node {old_node}: {kinds:?}"
    );
    let waiting = queue.waiting().await?;
    ensure!(
        waiting.as_deref() == Some("0"),
        "the message was deleted: {waiting:?} left"
    );
    Ok(())
}

/// EC2's status checks (Karpenter AWS's `interruption.instancestatus` suite, "should delete the NodeClaim when the
/// instance status check fails" in spirit): the emulator reports the inflate node's instance check impaired since
/// five minutes; within the controller's minute of polling, the claim is stamped with a termination timestamp of
/// now and deleted (forceful: the pod is deleted, not evicted), an `InstanceUnhealthy` and a
/// `TerminatingOnInterruption` Event are published, the pod gets a new node, and the metrics count it once.
#[tokio::test]
async fn an_instance_whose_status_check_fails_is_terminated_forcefully() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("instance_status_check").await? else {
        return Ok(());
    };
    let log = || tail(&bed.log(), 40);
    let client = bed.cluster.client()?;
    let mut pool = pool();
    pool["spec"]["template"]["spec"]["requirements"][0]["values"] = json!(["m5.large"]);
    apply_ok(&bed.cluster, &pool).await?;
    let namespace = bed.cluster.create_namespace("status").await?;
    create_inflate(&bed.cluster, &namespace, 1, "500m", "256Mi").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let claims: Api<NodeClaim> = Api::all(client.clone());
    let (pods_ref, claims_ref) = (&pods, &claims);
    // The claim whose Initialized Node the inflate pod is bound to, other than `not`.
    let bound = |not: Option<String>| async move {
        let nodes: Vec<String> = inflate_pods(pods_ref)
            .await?
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter_map(|p| node_of(p).map(str::to_owned))
            .collect();
        let list = claims_ref.list(&ListParams::default()).await?.items;
        Ok(list.into_iter().find(|c| {
            let node = c.status.as_ref().and_then(|s| s.node_name.clone());
            is_initialized(c)
                && node.is_some_and(|n| nodes.contains(&n))
                && not.as_deref() != c.metadata.name.as_deref()
        }))
    };
    let old = poll(
        "the inflate pod on an Initialized node",
        Duration::from_secs(120),
        || bound(None),
    )
    .await
    .with_context(log)?;
    let old_name = name(&old);
    let provider_id = old
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .context("providerID")?;
    let instance_id = kerf::cloud::instance_id(&provider_id)?;
    let since =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(300);
    bed.emu
        .seed_instance_status(&json!({
            "instanceId": instance_id,
            "instanceStatus": "impaired",
            "impairedSince": since.to_string(),
        }))
        .await?;
    let replacement = poll(
        "the pod on a new node and the impaired one's claim gone",
        Duration::from_secs(180),
        || {
            let old_name = old_name.clone();
            async move {
                if claims_ref.get_opt(&old_name).await?.is_some() {
                    return Ok(None);
                }
                bound(Some(old_name)).await
            }
        },
    )
    .await
    .with_context(log)?;
    ensure!(name(&replacement) != old_name);
    match bed.cloud.get(&provider_id).await {
        Err(CloudError::NotFound { .. }) => {}
        other => anyhow::bail!("the impaired instance should be terminated, got {other:?}"),
    }
    let text = bed.log();
    ensure!(
        text.lines().any(
            |l| l.contains("detected unhealthy instance owned by cluster")
                && l.contains(instance_id)
                && l.contains("InstanceStatus")
        ),
        "{}",
        log()
    );
    ensure!(
        text.lines().any(
            |l| l.contains("deleting nodeclaim: its instance is interrupted")
                && l.contains("instance_status")
                && l.contains("\"forceful\":true")
        ),
        "{}",
        log()
    );
    for reason in ["InstanceUnhealthy", "TerminatingOnInterruption"] {
        let events = events_with_reason(&bed.cluster, reason).await?;
        ensure!(
            events
                .iter()
                .any(|e| e.involved_object.name.as_deref() == Some(old_name.as_str())),
            "a {reason} Event on {old_name}: {events:?}"
        );
    }
    let metrics = bed.metrics().await?;
    for line in [
        "karpenter_interruption_instance_status_unhealthy_total{category=\"InstanceStatus\"} 1",
        "karpenter_nodeclaims_disrupted_total{reason=\"instance_status\",nodepool=\"general\",capacity_type=\"on-demand\"} 1",
    ] {
        ensure!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    Ok(())
}
