//! The controller's housekeeping on the real control plane and moto: the EC2NodeClass status shows what its
//! selectors resolved to; garbage collection terminates an instance tagged for the cluster that no NodeClaim
//! names, and deletes a NodeClaim whose instance was terminated behind kerf's back; deleting the class waits
//! for its NodeClaims and then deletes the instance profile kerf made for its role; a spot interruption
//! message on the interruption queue (moto's SQS) deletes the instance's NodeClaim, and termination takes the
//! instance away.

use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_ec2::types::{InstanceType, ResourceType, Tag, TagSpecification};
use k8s_openapi::api::core::v1::Event;
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodeclaim::NodeClaim;
use kerf::cloud::{CloudError, CloudProvider};
use kerf_e2e::aws::{node_class_spec, spot_interruption};
use kerf_e2e::controller::events_with_reason;
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_node_claim, tail, Testbed};
use kube::api::{Api, ListParams};

/// Waits until the instance behind `provider_id` is gone (terminated or shutting down).
async fn instance_gone(bed: &Testbed, provider_id: &str, timeout: Duration) -> Result<()> {
    poll(
        &format!("instance {provider_id} to be terminated"),
        timeout,
        || async move {
            match bed.cloud.get(provider_id).await {
                Err(CloudError::NotFound { .. }) => Ok(Some(())),
                Ok(_) => Ok(None),
                Err(other) => Err(other.into()),
            }
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 30)))
}

/// Waits until the NodeClaim `name` no longer exists.
async fn claim_gone(bed: &Testbed, name: &str, timeout: Duration) -> Result<()> {
    let claims: Api<NodeClaim> = Api::all(bed.cluster.client()?);
    let claims = &claims;
    poll(
        &format!("NodeClaim {name} to be deleted"),
        timeout,
        || async move { Ok(claims.get_opt(name).await?.is_none().then_some(())) },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 30)))
}

/// Each test runs a control plane and a controller; taking turns keeps them within their start-up deadlines on
/// a small machine.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn the_class_status_is_written_and_leaks_and_orphans_are_collected() -> Result<()> {
    let _turn = SERIAL.lock().await;
    let Some(bed) = Testbed::start_or_skip_with("the_class_status_is_written", |_| {
        vec!["--gc-interval".into(), "2s".into()]
    })
    .await?
    else {
        return Ok(());
    };

    // The EC2NodeClass status: what the selectors resolved to, and Ready.
    let classes: Api<EC2NodeClass> = Api::all(bed.cluster.client()?);
    let classes = &classes;
    let status = poll(
        "EC2NodeClass default to be Ready",
        Duration::from_secs(60),
        || async move {
            let class = classes.get("default").await?;
            let ready = class
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| kerf::api::condition::is_true(c, "Ready"));
            Ok(ready.then_some(class.status))
        },
    )
    .await?
    .context("status")?;
    let class = bed
        .cloud
        .resolve_node_class("default", &node_class_spec(&bed.name)?)
        .await?;
    let subnets: Vec<&str> = class
        .resolved
        .subnets
        .iter()
        .map(|s| s.subnet.id.as_str())
        .collect();
    let listed: Vec<&str> = status
        .subnets
        .iter()
        .flatten()
        .map(|s| s.id.as_str())
        .collect();
    assert_eq!(listed, subnets);
    assert_eq!(status.security_groups.as_ref().map(Vec::len), Some(1));
    // One entry per image and variant: the emulator publishes the x86_64 image as standard and NVIDIA.
    assert_eq!(status.amis.as_ref().map(Vec::len), Some(3));
    assert!(status
        .instance_profile
        .as_deref()
        .is_some_and(|p| p.starts_with(&format!("{}_", bed.name))));

    // A leak: an instance kerf launched for the cluster (its tags) that no NodeClaim names.
    let subnet = &class.resolved.subnets[0].subnet.id;
    let ami = &class
        .resolved
        .amis
        .iter()
        .find(|a| a.architecture == "x86_64")
        .context("an x86 AMI")?
        .id;
    let tags = TagSpecification::builder()
        .resource_type(ResourceType::Instance)
        .tags(
            Tag::builder()
                .key(format!("kubernetes.io/cluster/{}", bed.name))
                .value("owned")
                .build(),
        )
        .tags(
            Tag::builder()
                .key("karpenter.sh/nodepool")
                .value("default")
                .build(),
        )
        .tags(
            Tag::builder()
                .key("karpenter.sh/nodeclaim")
                .value("no-such-claim")
                .build(),
        )
        .build();
    let run = bed
        .cloud
        .ec2()
        .run_instances()
        .image_id(ami)
        .instance_type(InstanceType::M5Large)
        .subnet_id(subnet)
        .min_count(1)
        .max_count(1)
        .tag_specifications(tags)
        .send()
        .await?;
    let leaked = run.instances()[0].instance_id().context("instance id")?;
    let zone = class.resolved.subnets[0].subnet.zone.clone();
    let leaked = kerf::cloud::provider_id(&zone, leaked);
    // The 30 s grace, then the next 2 s pass.
    instance_gone(&bed, &leaked, Duration::from_secs(90)).await?;
    // EC2 reports the instance terminated before TerminateInstances has answered the controller, which logs then.
    poll(
        "the controller to log the collection",
        Duration::from_secs(10),
        || async {
            Ok(bed
                .log()
                .contains("garbage collected instance")
                .then_some(()))
        },
    )
    .await?;

    // An orphan: a launched claim whose instance is terminated behind kerf's back.
    apply_node_claim(&bed.cluster, "orphan", &["c5.large"], &["on-demand"]).await?;
    let claim = bed
        .wait_for_conditions("orphan", &["Launched"], Duration::from_secs(120))
        .await?;
    let provider_id = claim
        .status
        .and_then(|s| s.provider_id)
        .context("providerID")?;
    bed.cloud
        .ec2()
        .terminate_instances()
        .instance_ids(kerf::cloud::instance_id(&provider_id)?)
        .send()
        .await?;
    claim_gone(&bed, "orphan", Duration::from_secs(120)).await?;

    // Deleting the class waits while a NodeClaim uses it, then takes kerf's instance profile with it.
    let profile = status
        .instance_profile
        .clone()
        .context("instance profile")?;
    apply_node_claim(&bed.cluster, "holder", &["c5.large"], &["on-demand"]).await?;
    bed.wait_for_conditions("holder", &["Launched"], Duration::from_secs(120))
        .await?;
    bed.cluster
        .kubectl_ok(&["delete", "ec2nodeclass", "default", "--wait=false"])
        .await?;
    let cluster = &bed.cluster;
    poll(
        "the class deletion to wait on NodeClaim holder",
        Duration::from_secs(60),
        || async move {
            let waiting = events_with_reason(cluster, "WaitingOnNodeClaimTermination").await?;
            Ok(waiting
                .iter()
                .any(|e| {
                    e.involved_object.name.as_deref() == Some("default")
                        && e.message.as_deref().is_some_and(|m| m.contains("holder"))
                })
                .then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 30)))?;
    assert!(
        classes.get_opt("default").await?.is_some(),
        "the class is held while NodeClaim holder exists"
    );
    bed.cluster
        .kubectl_ok(&["delete", "nodeclaim", "holder", "--wait=false"])
        .await?;
    poll(
        "EC2NodeClass default to be deleted",
        Duration::from_secs(120),
        || async move { Ok(classes.get_opt("default").await?.is_none().then_some(())) },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 30)))?;
    let found = bed
        .cloud
        .iam()
        .get_instance_profile()
        .instance_profile_name(&profile)
        .send()
        .await;
    match found {
        Err(e)
            if e.as_service_error()
                .is_some_and(|e| e.is_no_such_entity_exception()) => {}
        other => anyhow::bail!("instance profile {profile} is still there: {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn a_spot_interruption_message_deletes_the_claim_and_its_instance() -> Result<()> {
    const TEST: &str = "a_spot_interruption_message";
    let _turn = SERIAL.lock().await;
    let Some((bed, queue)) = Testbed::start_with_interruption_queue_or_skip(TEST).await? else {
        return Ok(());
    };

    apply_node_claim(&bed.cluster, "spot-victim", &["c5.large"], &["on-demand"]).await?;
    let claim = bed
        .wait_for_conditions(
            "spot-victim",
            &["Launched", "Registered"],
            Duration::from_secs(120),
        )
        .await?;
    let provider_id = claim
        .status
        .and_then(|s| s.provider_id)
        .context("providerID")?;
    let instance_id = kerf::cloud::instance_id(&provider_id)?;
    queue.send(spot_interruption(instance_id)).await?;

    claim_gone(&bed, "spot-victim", Duration::from_secs(120)).await?;
    instance_gone(&bed, &provider_id, Duration::from_secs(30)).await?;
    let events: Api<Event> = Api::namespaced(bed.cluster.client()?, "default");
    let events = events.list(&ListParams::default()).await?;
    assert!(
        events
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("SpotInterrupted")),
        "a SpotInterrupted Event"
    );
    // The message was deleted once handled.
    assert_eq!(queue.waiting().await?.as_deref(), Some("0"));
    Ok(())
}
