//! The NodeClaim lifecycle on the real control plane and moto: `kerf controller` launches a NodeClaim's
//! instance, the stand-in kubelet registers its Node, kerf registers and initializes it; an injected
//! insufficient-capacity error steers the next launch to the next type (issue 5, test 4); killing the
//! controller inside CreateFleet and starting it again launches exactly one instance (test 5), and the next
//! controller labels a claim and Node that lack their class label. A NodePool's
//! `NodeRegistrationHealthy` follows the registrations and timeouts of its claims, and starts over when the pool
//! or its EC2NodeClass changes.
//!
//! Faults are server-wide and every test here launches, so the tests take turns.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodeclaim::NodeClaim;
use kerf::api::nodepool::NodePool;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_node_claim, apply_ok, tail, Testbed};
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const LIFECYCLE: [&str; 4] = ["Launched", "Registered", "Initialized", "Ready"];

#[tokio::test]
async fn a_nodeclaim_is_launched_registered_and_initialized() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(bed) =
        Testbed::start_or_skip("a_nodeclaim_is_launched_registered_and_initialized").await?
    else {
        return Ok(());
    };
    apply_node_claim(
        &bed.cluster,
        "lifecycle-a",
        &["c5.large", "m5.large"],
        &["on-demand"],
    )
    .await?;
    let claim = bed
        .wait_for_conditions("lifecycle-a", &LIFECYCLE, Duration::from_secs(120))
        .await?;
    // Karpenter's consistency controller: its Node has the shape the claim launched for.
    bed.wait_for_conditions(
        "lifecycle-a",
        &["ConsistentStateFound"],
        Duration::from_secs(90),
    )
    .await?;

    let instances = bed.instances_of("lifecycle-a").await?;
    ensure!(instances.len() == 1, "one instance, got {instances:?}");
    let instance = &instances[0];
    let status = claim.status.clone().context("status")?;
    assert_eq!(
        status.provider_id.as_deref(),
        Some(instance.provider_id.as_str())
    );
    assert_eq!(status.image_id.as_deref(), Some(instance.image_id.as_str()));
    let capacity = status.capacity.context("capacity")?;
    assert_eq!(
        capacity["cpu"],
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("2".into())
    );
    assert!(status.allocatable.is_some_and(|a| a.contains_key("memory")));
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    for (key, value) in [
        (
            "node.kubernetes.io/instance-type",
            instance.instance_type.as_str(),
        ),
        ("topology.kubernetes.io/zone", instance.zone.as_str()),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("kubernetes.io/arch", "amd64"),
    ] {
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "claim label {key}"
        );
    }
    assert!(claim
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == "karpenter.sh/termination"));

    let node_name = status.node_name.context("status.nodeName")?;
    let nodes: Api<Node> = Api::all(bed.cluster.client()?);
    let node = nodes.get(&node_name).await?;
    let taints: Vec<String> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    assert!(
        !taints
            .iter()
            .any(|t| t.starts_with("karpenter.sh/unregistered")),
        "the unregistered taint is lifted: {taints:?}"
    );
    assert!(
        taints.contains(&"dedicated:NoSchedule".to_owned()),
        "{taints:?}"
    );
    let node_labels = node.metadata.labels.clone().unwrap_or_default();
    for key in ["karpenter.sh/registered", "karpenter.sh/initialized"] {
        assert_eq!(
            node_labels.get(key).map(String::as_str),
            Some("true"),
            "{key}"
        );
    }
    assert_eq!(node_labels.get("team").map(String::as_str), Some("e2e"));
    assert!(
        node_labels.contains_key("karpenter.k8s.aws/ec2nodeclass"),
        "the Node names its class: {node_labels:?}"
    );
    assert!(node
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == "karpenter.sh/termination"));
    let owner = node
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "NodeClaim")
        .context("an owner reference to the claim")?;
    assert_eq!(owner.name, "lifecycle-a");
    assert_eq!(Some(&owner.uid), claim.metadata.uid.as_ref());

    let log = bed.log();
    for message in [
        "launched nodeclaim",
        "registered nodeclaim",
        "initialized nodeclaim",
    ] {
        assert!(
            log.contains(message),
            "log has {message:?}:\n{}",
            tail(&log, 30)
        );
    }
    Ok(())
}

/// Whether an Event with `reason` names the object `name`.
async fn has_event(bed: &Testbed, reason: &str, name: &str) -> Result<bool> {
    let events: Api<Event> = Api::all(bed.cluster.client()?);
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .any(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        }))
}

#[tokio::test]
async fn an_ice_for_the_cheapest_type_launches_the_next_and_the_next_claim_avoids_it() -> Result<()>
{
    let _turn = SERIAL.lock().await;
    let Some(bed) =
        Testbed::start_in_or_skip("lifecycle-faults", "an_ice_for_the_cheapest_type").await?
    else {
        return Ok(());
    };
    let types = ["c6i.large", "m6i.large"];
    bed.emu
        .set_faults(&json!({"capacity": [{"instanceType": "c6i.large"}]}))
        .await?;
    apply_node_claim(&bed.cluster, "ice-a", &types, &["on-demand"]).await?;
    let launched = bed
        .wait_for_conditions("ice-a", &["Launched"], Duration::from_secs(90))
        .await;
    bed.emu.clear_faults().await?;
    let first = launched?;
    let type_of = |claim: &NodeClaim| {
        claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("node.kubernetes.io/instance-type"))
            .cloned()
    };
    assert_eq!(type_of(&first).as_deref(), Some("m6i.large"));

    // Capacity is back, but the ICE cache keeps c6i.large out of the next launch for 3 minutes.
    apply_node_claim(&bed.cluster, "ice-b", &types, &["on-demand"]).await?;
    let second = bed
        .wait_for_conditions("ice-b", &["Launched"], Duration::from_secs(90))
        .await?;
    assert_eq!(type_of(&second).as_deref(), Some("m6i.large"));

    // No capacity at all: the claim is deleted with an InsufficientCapacityError Event.
    bed.emu
        .set_faults(&json!({"capacity": [{"instanceType": "*"}]}))
        .await?;
    apply_node_claim(&bed.cluster, "ice-c", &types, &["on-demand"]).await?;
    let claims: Api<NodeClaim> = Api::all(bed.cluster.client()?);
    let claims = &claims;
    let gone = poll(
        "NodeClaim ice-c to be deleted",
        Duration::from_secs(90),
        || async move { Ok(claims.get_opt("ice-c").await?.is_none().then_some(())) },
    )
    .await;
    bed.emu.clear_faults().await?;
    gone.with_context(|| tail(&bed.log(), 30))?;
    ensure!(
        has_event(&bed, "InsufficientCapacityError", "ice-c").await?,
        "an InsufficientCapacityError Event on ice-c"
    );
    assert!(bed.instances_of("ice-c").await?.is_empty());
    Ok(())
}

/// The emulator's fault configuration, to see when an injected delay has been taken.
async fn faults(bed: &Testbed) -> Result<serde_json::Value> {
    let url = format!("{}/_emu/faults", bed.emu.endpoint());
    let response = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()?
        .get(url)
        .send()
        .await?;
    Ok(response.error_for_status()?.json().await?)
}

#[tokio::test]
async fn killing_the_controller_inside_create_fleet_launches_one_instance_and_leaks_none(
) -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(mut bed) = Testbed::start_in_or_skip(
        "lifecycle-faults",
        "killing_the_controller_inside_create_fleet",
    )
    .await?
    else {
        return Ok(());
    };
    bed.emu
        // Real calls only: the EC2NodeClass validation's dry-run CreateFleet must not take the delay.
        .set_faults(
            &json!({"api": [{"action": "CreateFleet", "delayMs": 8000, "count": 1,
                                     "dryRun": false}]}),
        )
        .await?;
    apply_node_claim(
        &bed.cluster,
        "crash-a",
        &["c5.large", "m5.large"],
        &["on-demand"],
    )
    .await?;
    // The rule's count drops to 0 as the CreateFleet call arrives; the emulator then holds it 8 s.
    let bed_ref = &bed;
    let in_flight = poll(
        "CreateFleet to be in flight",
        Duration::from_secs(90),
        || async move {
            let config = faults(bed_ref).await?;
            Ok((config["api"][0]["count"] == 0).then_some(()))
        },
    )
    .await;
    if in_flight.is_err() {
        bed.emu.clear_faults().await?;
    }
    in_flight.with_context(|| tail(&bed.log(), 30))?;
    bed.controller = None; // SIGKILL, mid-call
    bed.emu.clear_faults().await?;

    // The emulator finishes the call: an instance tagged for the claim exists, and no status names it.
    let bed_ref = &bed;
    poll(
        "the instance of the interrupted CreateFleet",
        Duration::from_secs(60),
        || async move { Ok((!bed_ref.instances_of("crash-a").await?.is_empty()).then_some(())) },
    )
    .await?;
    let claims: Api<NodeClaim> = Api::all(bed.cluster.client()?);
    let before = claims.get("crash-a").await?;
    assert!(
        before
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none(),
        "the crash came before the status write"
    );

    bed.restart_controller().await?;
    let claim = bed
        .wait_for_conditions("crash-a", &LIFECYCLE, Duration::from_secs(120))
        .await?;
    let instances = bed.instances_of("crash-a").await?;
    ensure!(instances.len() == 1, "exactly one instance: {instances:?}");
    assert_eq!(
        claim.status.and_then(|s| s.provider_id),
        Some(instances[0].provider_id.clone())
    );
    assert!(
        bed.log().contains(r#""adopted":true"#),
        "{}",
        tail(&bed.log(), 30)
    );
    class_labels_are_hydrated_after_a_restart(&mut bed, "crash-a").await
}

/// A claim and Node made before kerf labelled them with their class (an older kerf, or Karpenter before v1.1)
/// get `karpenter.k8s.aws/ec2nodeclass` from the next controller, and nothing is launched again (Karpenter's
/// nodeclaim and node hydration).
async fn class_labels_are_hydrated_after_a_restart(bed: &mut Testbed, claim: &str) -> Result<()> {
    const CLASS_LABEL: &str = "karpenter.k8s.aws/ec2nodeclass";
    bed.controller = None;
    let claims: Api<NodeClaim> = Api::all(bed.cluster.client()?);
    let nodes: Api<Node> = Api::all(bed.cluster.client()?);
    let node_name = claims
        .get(claim)
        .await?
        .status
        .and_then(|s| s.node_name)
        .context("a registered claim names its node")?;
    let strip = Patch::Merge(json!({"metadata": {"labels": {CLASS_LABEL: null}}}));
    claims.patch(claim, &PatchParams::default(), &strip).await?;
    nodes
        .patch(&node_name, &PatchParams::default(), &strip)
        .await?;

    bed.restart_controller().await?;
    let (claims, nodes, node_name) = (&claims, &nodes, node_name.as_str());
    poll(
        "the claim and its Node to carry their class label again",
        Duration::from_secs(60),
        || async move {
            let claim_has = claims.get(claim).await?.metadata.labels.unwrap_or_default();
            let node_has = nodes
                .get(node_name)
                .await?
                .metadata
                .labels
                .unwrap_or_default();
            Ok(
                (claim_has.get(CLASS_LABEL).map(String::as_str) == Some("default")
                    && node_has.get(CLASS_LABEL).map(String::as_str) == Some("default"))
                .then_some(()),
            )
        },
    )
    .await
    .with_context(|| tail(&bed.log(), 30))?;
    let instances = bed.instances_of(claim).await?;
    ensure!(instances.len() == 1, "still one instance: {instances:?}");
    Ok(())
}

const HEALTH: &str = "NodeRegistrationHealthy";

/// The pool's `NodeRegistrationHealthy`, if set.
fn registration_health(pool: &NodePool) -> Option<&kerf::api::condition::Condition> {
    let conditions = pool.status.as_ref()?.conditions.as_deref()?;
    kerf::api::condition::get(conditions, HEALTH)
}

/// Waits until pool `health`'s registration health is `status` with `reason` (and, with `generations`, for that
/// pool generation and class generation).
async fn wait_for_health(
    bed: &Testbed,
    status: &str,
    reason: &str,
    generations: Option<(i64, i64)>,
) -> Result<NodePool> {
    let pools: Api<NodePool> = Api::all(bed.cluster.client()?);
    let pools = &pools;
    poll(
        &format!("NodePool health to be {HEALTH}={status} ({reason}), generations {generations:?}"),
        Duration::from_secs(120),
        || async move {
            let pool = pools.get("health").await?;
            let class_generation = pool
                .status
                .as_ref()
                .and_then(|s| s.node_class_observed_generation);
            let matches = registration_health(&pool).is_some_and(|c| {
                c.status == status
                    && c.reason == reason
                    && generations.is_none_or(|(pool_gen, class_gen)| {
                        c.observed_generation == Some(pool_gen)
                            && class_generation == Some(class_gen)
                    })
            });
            Ok(matches.then_some(pool))
        },
    )
    .await
    .with_context(|| tail(&bed.log(), 40))
}

/// A NodeClaim of pool `health` (labelled with it and owned by it) launching from class `class`.
async fn apply_pool_claim(bed: &Testbed, name: &str, pool_uid: &str, class: &str) -> Result<()> {
    let mut claim = serde_json::to_value(kerf_e2e::aws::node_claim(
        name,
        &["c5.large"],
        &["on-demand"],
    )?)?;
    claim["metadata"]["labels"]["karpenter.sh/nodepool"] = json!("health");
    claim["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "name": "health", "uid": pool_uid, "blockOwnerDeletion": true}]);
    claim["spec"]["nodeClassRef"]["name"] = json!(class);
    apply_ok(&bed.cluster, &claim).await
}

/// A claim whose Node never registers, made quickly: it cannot launch (its class does not exist), and once kerf
/// says so its status is rewritten as launched 20 minutes ago, past the 15-minute registration timeout.
async fn lose_claim(bed: &Testbed, name: &str, pool_uid: &str) -> Result<()> {
    apply_pool_claim(bed, name, pool_uid, "missing").await?;
    let claims: Api<NodeClaim> = Api::all(bed.cluster.client()?);
    let claims = &claims;
    poll(
        &format!("{name} to fail its launch"),
        Duration::from_secs(60),
        || async move {
            let claim = claims.get(name).await?;
            let conditions = claim.status.and_then(|s| s.conditions).unwrap_or_default();
            Ok(kerf::api::condition::get(&conditions, "Launched")
                .is_some_and(|c| c.reason == "NodeClassNotReady")
                .then_some(()))
        },
    )
    .await?;
    let launched = (k8s_openapi::jiff::Timestamp::now()
        - k8s_openapi::jiff::SignedDuration::from_mins(20))
    .round(k8s_openapi::jiff::Unit::Second)?;
    let status = json!({"status": {
        "providerID": "aws:///us-west-2a/i-0000000000000dead",
        "conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "message": "",
                        "lastTransitionTime": launched.to_string()}],
    }});
    claims
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    poll(
        &format!("{name} to be deleted"),
        Duration::from_secs(60),
        || async move { Ok(claims.get_opt(name).await?.is_none().then_some(())) },
    )
    .await
    .with_context(|| tail(&bed.log(), 30))
}

/// Karpenter's registrationhealth suite and the lifecycle's accounting: a new pool's condition is Unknown with
/// the class generation it saw; two claims that time out registering make it False (RegistrationFailed), without
/// touching the pool's Ready; a change of the class makes it Unknown again, a registration True, and a change of
/// the pool Unknown again.
#[tokio::test]
async fn a_pools_registration_health_follows_its_claims_and_starts_over_on_changes() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(bed) = Testbed::start_or_skip("a_pools_registration_health").await? else {
        return Ok(());
    };
    let client = bed.cluster.client()?;
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "health"},
            "spec": {
                "disruption": {"consolidateAfter": "Never"},
                "template": {"spec": {"requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}}},
            },
        }),
    )
    .await?;
    let classes: Api<EC2NodeClass> = Api::all(client.clone());
    let class_generation = classes
        .get("default")
        .await?
        .metadata
        .generation
        .context("generation")?;
    let pool = wait_for_health(
        &bed,
        "Unknown",
        "AwaitingReconciliation",
        Some((1, class_generation)),
    )
    .await?;
    let uid = pool.metadata.uid.context("uid")?;

    // One lost claim is no trend; two of the last four are.
    lose_claim(&bed, "health-lost-1", &uid).await?;
    wait_for_health(&bed, "Unknown", "AwaitingReconciliation", None).await?;
    lose_claim(&bed, "health-lost-2", &uid).await?;
    let pool = wait_for_health(&bed, "False", "RegistrationFailed", None).await?;
    let message = registration_health(&pool).map(|c| c.message.as_str());
    ensure!(message == Some("Failed to register node"), "{message:?}");

    // Ready does not depend on it (the pool becomes Ready once its class is validated).
    let pools: Api<NodePool> = Api::all(client.clone());
    let pools_ref = &pools;
    poll(
        "NodePool health to be Ready while its registration is unhealthy",
        Duration::from_secs(120),
        || async move {
            let pool = pools_ref.get("health").await?;
            let ready = pool
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_deref())
                .is_some_and(|c| kerf::api::condition::is_true(c, "Ready"));
            let unhealthy = registration_health(&pool).is_some_and(|c| c.status == "False");
            Ok((ready && unhealthy).then_some(()))
        },
    )
    .await
    .with_context(|| tail(&bed.log(), 40))?;

    // The class changes: the pool starts over with the class's new generation.
    classes
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"tags": {"e2e": "changed"}}})),
        )
        .await?;
    let changed = classes
        .get("default")
        .await?
        .metadata
        .generation
        .context("generation")?;
    ensure!(changed > class_generation, "the class generation moves");
    wait_for_health(
        &bed,
        "Unknown",
        "AwaitingReconciliation",
        Some((1, changed)),
    )
    .await?;

    // A claim of the pool registers: healthy.
    apply_pool_claim(&bed, "health-ok", &uid, "default").await?;
    bed.wait_for_conditions("health-ok", &["Registered"], Duration::from_secs(120))
        .await?;
    wait_for_health(&bed, "True", HEALTH, None).await?;

    // The pool changes: it starts over again.
    pools
        .patch(
            "health",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"limits": {"cpu": "1000"}}})),
        )
        .await?;
    wait_for_health(
        &bed,
        "Unknown",
        "AwaitingReconciliation",
        Some((2, changed)),
    )
    .await?;
    Ok(())
}

/// Karpenter's placement-group launch and registration hook, end to end: a class selecting a partition group
/// launches its claims into the group; a claim that required no partition gets the one EC2 chose (read back with
/// DescribeInstances before its Node is freed of the unregistered taint), and the claim and its Node carry both
/// placement-group labels.
#[tokio::test]
async fn a_claim_of_a_class_selecting_a_partition_group_is_labelled_with_its_partition(
) -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(bed) = Testbed::start_or_skip(
        "a_claim_of_a_class_selecting_a_partition_group_is_labelled_with_its_partition",
    )
    .await?
    else {
        return Ok(());
    };
    let name = format!("{}-hpc", bed.name);
    let created = bed
        .cloud
        .ec2()
        .create_placement_group()
        .group_name(&name)
        .strategy(aws_sdk_ec2::types::PlacementStrategy::Partition)
        .partition_count(2)
        .send()
        .await?;
    let group = created
        .placement_group()
        .and_then(|g| g.group_id())
        .context("group id")?
        .to_owned();
    let classes: Api<EC2NodeClass> = Api::all(bed.cluster.client()?);
    classes
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"placementGroupSelector": {"name": name}}})),
        )
        .await?;
    apply_node_claim(&bed.cluster, "pg-a", &["m5.large"], &["on-demand"]).await?;
    let claim = bed
        .wait_for_conditions("pg-a", &LIFECYCLE, Duration::from_secs(120))
        .await?;
    let instances = bed.instances_of("pg-a").await?;
    ensure!(instances.len() == 1, "one instance, got {instances:?}");
    let placement = instances[0].placement.clone().context("in a group")?;
    assert_eq!(placement.group_id, group);
    let partition = placement
        .partition
        .context("EC2 chose a partition")?
        .to_string();
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    let node_name = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("status.nodeName")?;
    let node = Api::<Node>::all(bed.cluster.client()?)
        .get(&node_name)
        .await?;
    let node_labels = node.metadata.labels.unwrap_or_default();
    for (key, value) in [
        ("karpenter.k8s.aws/placement-group-id", &group),
        ("karpenter.k8s.aws/placement-group-partition", &partition),
    ] {
        assert_eq!(labels.get(key), Some(value), "claim label {key}");
        assert_eq!(node_labels.get(key), Some(value), "node label {key}");
    }
    Ok(())
}
