//! Disruption on the real control plane with moto and the stand-in kubelet (issue 6): once the inflate pods
//! are gone, `kerf controller` removes the empty nodes no faster than the NodePool's budget allows, and a
//! scheduled budget of 0 holds removal until its window closes, saying so in a `DisruptionBlocked` Event and the
//! NodePool's `DisruptionAllowed` condition (which turns True when the window closes).

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::Condition;
use kerf::api::nodeclaim::NodeClaim;
use kerf::api::nodepool::NodePool;
use kerf_e2e::controller::{create_inflate, events_with_reason, node_claims, node_pool};
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kerf_e2e::Cluster;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// A NodePool of c5.large on-demand nodes (one 1-CPU inflate pod fills one), consolidating at once, with
/// `budgets`.
fn pool(budgets: Value) -> Value {
    let mut pool = node_pool("general", Value::Null);
    pool["spec"]["template"]["spec"]["requirements"] = json!([
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
    ]);
    pool["spec"]["disruption"] = json!({
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "0s",
        "budgets": budgets
    });
    pool
}

fn is_initialized(claim: &NodeClaim) -> bool {
    claim
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| kerf::api::condition::is_true(c, "Initialized"))
}

/// Applies `pool`, runs `replicas` inflate pods and waits until as many claims are initialized; returns the
/// inflate namespace.
async fn nodes_for_inflate(bed: &Testbed, pool: Value, replicas: usize) -> Result<String> {
    apply_ok(&bed.cluster, &pool).await?;
    let namespace = bed.cluster.create_namespace("inflate").await?;
    create_inflate(&bed.cluster, &namespace, replicas as i32, "1", "512Mi").await?;
    let cluster = &bed.cluster;
    poll(
        &format!("{replicas} initialized NodeClaims"),
        Duration::from_secs(120),
        || async move {
            let claims = node_claims(cluster).await?;
            Ok((claims.iter().filter(|c| is_initialized(c)).count() >= replicas).then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    Ok(namespace)
}

/// The `DisruptionAllowed` condition of the NodePool `general`, once written.
async fn disruption_allowed(cluster: &Cluster) -> Result<Option<Condition>> {
    let pools: Api<NodePool> = Api::all(cluster.client()?);
    let pool = pools.get("general").await?;
    Ok(pool
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "DisruptionAllowed"))
}

async fn scale_inflate_to_zero(bed: &Testbed, namespace: &str) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(bed.cluster.client()?, namespace);
    deployments
        .patch(
            "inflate",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn empty_nodes_are_removed_one_at_a_time_under_a_budget_of_one() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("empty_nodes_are_removed_one_at_a_time").await? else {
        return Ok(());
    };
    let namespace = nodes_for_inflate(&bed, pool(json!([{"nodes": "1"}])), 3).await?;
    scale_inflate_to_zero(&bed, &namespace).await?;

    // Watch until every claim is gone: never more than one may be deleting at once.
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut most_deleting = 0;
    let mut marked_empty = false;
    loop {
        let claims = node_claims(&bed.cluster).await?;
        let deleting = claims
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_some())
            .count();
        // Candidates carry `DisruptionReason: Empty` from before their deletion.
        marked_empty |= claims.iter().any(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "DisruptionReason" && c.status == "True" && c.reason == "Empty")
        });
        most_deleting = most_deleting.max(deleting);
        ensure!(
            deleting <= 1,
            "{deleting} NodeClaims deleting at once under a budget of 1"
        );
        if claims.is_empty() {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "{} NodeClaims left after 150 s; kerf controller log:\n{}",
            claims.len(),
            tail(&bed.log(), 40)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(most_deleting, 1, "a deletion was observed");
    assert!(marked_empty, "no candidate carried DisruptionReason=Empty");
    // A command abandoned before its delete (its taint lost a race with the kubelet's Node update) is decided
    // again on a later pass: one command carried out per node.
    let log = bed.log();
    let carried_out = log
        .matches("disrupting node(s)")
        .count()
        .saturating_sub(log.matches("disruption command abandoned").count());
    assert_eq!(carried_out, 3, "one command per node:\n{}", tail(&log, 40));
    assert!(
        !events_with_reason(&bed.cluster, "DisruptionTerminating")
            .await?
            .is_empty(),
        "DisruptionTerminating Events"
    );
    Ok(())
}

#[tokio::test]
async fn a_scheduled_budget_of_zero_blocks_removal_until_its_window_closes() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("a_scheduled_budget_of_zero_blocks_removal").await?
    else {
        return Ok(());
    };
    // Blocked from the start; the scheduled window replaces this once the node is empty.
    let namespace = nodes_for_inflate(&bed, pool(json!([{"nodes": "0"}])), 1).await?;
    scale_inflate_to_zero(&bed, &namespace).await?;

    // A window opening at the current minute (UTC) for 2 minutes: active now, closed within 2 minutes.
    let now = Timestamp::now();
    let utc = now.to_zoned(k8s_openapi::jiff::tz::TimeZone::UTC);
    let schedule = format!("{} {} * * *", utc.minute(), utc.hour());
    let window_start = Timestamp::from_second(now.as_second() - now.as_second().rem_euclid(60))?;
    let window_end = window_start + k8s_openapi::jiff::SignedDuration::from_secs(120);
    apply_ok(
        &bed.cluster,
        &pool(json!([
            {"nodes": "0", "schedule": schedule, "duration": "2m"},
            {"nodes": "100%"}
        ])),
    )
    .await?;

    // The Event keeps Karpenter's text and adds the binding budget and when disruption opens again.
    let binding = format!("budgets[0] active: nodes \"0\", schedule \"{schedule}\" for 2m");
    let event = format!(
        "No allowed disruptions for disruption reason Empty due to blocking budget: {binding}; 1 allowed from \
         {window_end}"
    );
    let cluster = &bed.cluster;
    let event_ref = &event;
    poll(
        "a DisruptionBlocked Event on the NodePool naming the scheduled budget",
        Duration::from_secs(30),
        || async move {
            let events = events_with_reason(cluster, "DisruptionBlocked").await?;
            Ok(events
                .iter()
                .any(|e| {
                    e.involved_object.kind.as_deref() == Some("NodePool")
                        && e.message.as_deref() == Some(event_ref.as_str())
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    // The condition says the same: False, the budget, and when the window closes.
    let closing = format!("Empty: 0 allowed until {window_end}, then 1 ({binding})");
    let closing_ref = &closing;
    let blocked = poll(
        "DisruptionAllowed False with the scheduled budget",
        Duration::from_secs(30),
        || async move {
            Ok(disruption_allowed(cluster)
                .await?
                .filter(|c| c.status == "False" && c.message.contains(closing_ref.as_str())))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    assert_eq!(blocked.reason, "BlockedByBudget");
    // While the window is open (at least 60 s of it are left), the node stays.
    let hold_until = Instant::now() + Duration::from_secs(40);
    while Instant::now() < hold_until && Timestamp::now() < window_end {
        let claims = node_claims(cluster).await?;
        ensure!(
            claims.len() == 1 && claims[0].metadata.deletion_timestamp.is_none(),
            "the node was disrupted inside the blocking window"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // When the window closes the condition turns True on its own timer, before disruption (a 10 s pass, then
    // a 15 s validation) has removed anything.
    let allowed = poll(
        "DisruptionAllowed True after the window",
        Duration::from_secs(180),
        || async move {
            Ok(disruption_allowed(cluster)
                .await?
                .filter(|c| c.status == "True"))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    let flipped: Timestamp = allowed.last_transition_time.parse()?;
    ensure!(
        flipped >= window_end
            && flipped < window_end + k8s_openapi::jiff::SignedDuration::from_secs(10),
        "DisruptionAllowed turned True at {flipped}, the window closed at {window_end}: {allowed:?}"
    );
    poll(
        "the empty node to be removed after the window",
        Duration::from_secs(180),
        || async move {
            let claims = node_claims(cluster).await?;
            let removing = claims.is_empty()
                || claims
                    .iter()
                    .any(|c| c.metadata.deletion_timestamp.is_some());
            Ok(removing.then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    assert!(
        Timestamp::now() >= window_end,
        "removal started only after the window closed at {window_end}"
    );
    Ok(())
}

/// The engine's state tracking on a real cluster (issue 16): the NodePool template's annotations reach the Node
/// (so `karpenter.sh/do-not-disrupt` there protects it), and a pod bound to the node, then one leaving it, stamp
/// the claim's `status.lastPodEventTime`, which `consolidateAfter` counts from.
#[tokio::test]
async fn template_annotations_reach_the_node_and_pod_events_stamp_the_claim() -> Result<()> {
    let Some(bed) = Testbed::start_or_skip("template_annotations_and_pod_events").await? else {
        return Ok(());
    };
    let mut pool = pool(json!([{"nodes": "0"}]));
    pool["spec"]["template"]["metadata"] = json!({"annotations": {
        "example.com/owner": "team-a",
        "karpenter.sh/do-not-disrupt": "true",
    }});
    let namespace = nodes_for_inflate(&bed, pool, 1).await?;
    let cluster = &bed.cluster;
    let stamped = |after: Option<Timestamp>| async move {
        let claims = node_claims(cluster).await?;
        let stamp = claims
            .iter()
            .filter_map(|c| c.status.as_ref()?.last_pod_event_time.as_deref())
            .filter_map(|t| t.parse::<Timestamp>().ok())
            .find(|t| after.is_none_or(|after| *t > after));
        Ok(stamp)
    };
    let first = poll(
        "lastPodEventTime after the inflate pod was bound",
        Duration::from_secs(60),
        || stamped(None),
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;

    // The pool's readiness conditions, as Karpenter's readiness and validation controllers keep them (the READY
    // column of `kubectl get nodepools`).
    poll(
        "the NodePool's Ready, NodeClassReady and ValidationSucceeded conditions",
        Duration::from_secs(60),
        || async move {
            let pools: Api<NodePool> = Api::all(cluster.client()?);
            let conditions = pools
                .get("general")
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default();
            Ok(["Ready", "NodeClassReady", "ValidationSucceeded"]
                .iter()
                .all(|t| kerf::api::condition::is_true(&conditions, t))
                .then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;

    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(cluster.client()?);
    let node = nodes
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .find(|n| {
            n.metadata.labels.as_ref().is_some_and(|l| {
                l.get("karpenter.sh/nodepool").map(String::as_str) == Some("general")
            })
        })
        .context("the pool's Node")?;
    let annotations = node.metadata.annotations.unwrap_or_default();
    ensure!(
        annotations.get("example.com/owner").map(String::as_str) == Some("team-a"),
        "the template's annotation is not on the Node: {annotations:?}"
    );
    // The template's do-not-disrupt reaches the Node, and each pass says so on the Node and its NodeClaim, in
    // Karpenter's words.
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let node_name = &node_name;
    poll(
        "a DisruptionBlocked Event on the Node and its NodeClaim",
        Duration::from_secs(60),
        || async move {
            let events = events_with_reason(cluster, "DisruptionBlocked").await?;
            let on = |kind: &str| {
                events.iter().any(|e| {
                    e.involved_object.kind.as_deref() == Some(kind)
                        && (kind != "Node" || e.involved_object.name.as_deref() == Some(node_name))
                        && e.message.as_deref()
                            == Some("Disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation")
                })
            };
            Ok((on("Node") && on("NodeClaim")).then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;

    // Stamps within ten seconds of the last are skipped: the pod leaves after that.
    poll(
        "ten seconds after the first stamp",
        Duration::from_secs(30),
        || async move {
            let now = Timestamp::now();
            Ok((now.duration_since(first).as_secs() > 10).then_some(()))
        },
    )
    .await?;
    scale_inflate_to_zero(&bed, &namespace).await?;
    poll(
        "a later lastPodEventTime after the pod left",
        Duration::from_secs(60),
        || stamped(Some(first)),
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    // consolidateAfter is 0s: the claim is marked Consolidatable (the budget of 0 keeps the node).
    poll(
        "the Consolidatable condition",
        Duration::from_secs(60),
        || async move {
            let claims = node_claims(cluster).await?;
            Ok(claims
                .iter()
                .any(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| kerf::api::condition::is_true(c, "Consolidatable"))
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    Ok(())
}
