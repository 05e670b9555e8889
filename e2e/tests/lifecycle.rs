//! The NodeClaim lifecycle on the real control plane and moto: `kerf controller` launches a NodeClaim's
//! instance, the stand-in kubelet registers its Node, kerf registers and initializes it; an injected
//! insufficient-capacity error steers the next launch to the next type (issue 5, test 4); killing the
//! controller inside CreateFleet and starting it again launches exactly one instance (test 5).
//!
//! Faults are server-wide and every test here launches, so the tests take turns.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kerf::api::nodeclaim::NodeClaim;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_node_claim, tail, Testbed};
use kube::api::{Api, ListParams};
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
    let Some(bed) = Testbed::start_or_skip("an_ice_for_the_cheapest_type").await? else {
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
    let Some(mut bed) =
        Testbed::start_or_skip("killing_the_controller_inside_create_fleet").await?
    else {
        return Ok(());
    };
    bed.emu
        .set_faults(&json!({"api": [{"action": "CreateFleet", "delayMs": 8000, "count": 1}]}))
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
    Ok(())
}
