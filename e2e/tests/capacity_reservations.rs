//! Capacity reservations end to end on moto (whose DescribeCapacityReservations and targeted launches come from
//! `moto_emu.py`): kerf-aws resolves an EC2NodeClass's `capacityReservationSelectorTerms`, offers the reservation,
//! launches into it until EC2 says it is full, and counts the slot free again on termination; and `kerf controller`
//! with the control plane puts a pending pod on a node launched into the reservation, labelled as Karpenter labels
//! it, with the reservation in the class status.
//!
//! Each test seeds reservations with IDs and tags of its own on the shared emulator.

use std::time::{Duration, SystemTime};

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Node;
use kerf::api::ec2nodeclass::EC2NodeClass;
use kerf::api::nodeclaim::NodeClaim;
use kerf::catalog::CapacityType;
use kerf::cloud::{CloudError, CloudProvider};
use kerf_e2e::aws::{node_claim, node_class_spec, unique_reservation_id, AwsEmu, Launchable};
use kerf_e2e::controller::{create_inflate, node_claims};
use kerf_e2e::poll;
use kerf_e2e::testbed::{apply_ok, tail, Testbed};
use kube::api::Api;
use serde_json::json;

/// The instances reservation `id` still takes, as the emulator's DescribeCapacityReservations says.
async fn available(ec2: &aws_sdk_ec2::Client, id: &str) -> Result<i32> {
    let out = ec2
        .describe_capacity_reservations()
        .capacity_reservation_ids(id)
        .send()
        .await?;
    out.capacity_reservations()
        .first()
        .and_then(|r| r.available_instance_count())
        .context("the reservation's available count")
}

#[tokio::test]
async fn a_selected_reservation_is_offered_and_launched_into_until_it_is_full() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("a_selected_reservation_is_offered")? else {
        return Ok(());
    };
    let Launchable {
        cluster,
        cloud,
        network,
        ..
    } = emu.launchable("reserve").await?;
    let (mine, tagged, elsewhere) = (
        unique_reservation_id(),
        unique_reservation_id(),
        unique_reservation_id(),
    );
    emu.seed_capacity_reservations(&json!([
        {"CapacityReservationId": mine, "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
         "AvailableInstanceCount": 2},
        // Selected by its tag: a capacity block that ends far ahead.
        {"CapacityReservationId": tagged, "InstanceType": "c5.large", "AvailabilityZone": "us-west-2b",
         "AvailableInstanceCount": 1, "ReservationType": "capacity-block",
         "EndDate": "2099-01-01T00:00:00Z", "Tags": {"karpenter.sh/discovery": cluster}},
        // Tagged for the cluster too, but no longer active: never listed.
        {"CapacityReservationId": elsewhere, "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
         "State": "cancelled", "Tags": {"karpenter.sh/discovery": cluster}},
    ]))
    .await?;
    let mut spec = node_class_spec(&cluster)?;
    spec.capacity_reservation_selector_terms = Some(serde_json::from_value(json!([
        {"id": mine},
        {"tags": {"karpenter.sh/discovery": cluster}},
    ]))?);
    let class = cloud.resolve_node_class("default", &spec).await?;
    let listed = class
        .resolved
        .capacity_reservations
        .clone()
        .context("looked up: the ReservedCapacity gate is on by default")?;
    let mut expected = [mine.clone(), tagged.clone()];
    expected.sort();
    let ids: Vec<&str> = listed.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, expected);
    let block = listed
        .iter()
        .find(|r| r.id == tagged)
        .context("the block")?;
    assert_eq!(
        serde_json::to_value(block)?,
        json!({"availabilityZone": "us-west-2b", "endTime": "2099-01-01T00:00:00Z", "id": tagged,
               "instanceMatchCriteria": "targeted", "instanceType": "c5.large", "ownerID": "123456789012",
               "reservationType": "capacity-block", "state": "active", "interruptible": false})
    );

    // Each reservation is an offering of its type in its zone, with its room, nearly free.
    let types = cloud.instance_types(&class, SystemTime::now()).await?;
    let reserved = |name: &str| {
        types
            .iter()
            .find(|t| t.name == name)
            .into_iter()
            .flat_map(|t| &t.offerings)
            .filter(|o| o.capacity_type == CapacityType::Reserved)
            .map(|o| {
                let r = o.reservation.clone().unwrap_or_else(|| panic!("{o:?}"));
                (o.zone.clone(), r.id, r.capacity, o.available, o.price)
            })
            .collect::<Vec<_>>()
    };
    let m5 = reserved("m5.large");
    ensure!(m5.len() == 1, "{m5:?}");
    assert_eq!(
        (m5[0].0.as_str(), m5[0].1.as_str(), m5[0].2, m5[0].3),
        ("us-west-2a", mine.as_str(), 2, true)
    );
    assert!(m5[0].4.is_some_and(|p| p > 0.0 && p < 1e-6), "{m5:?}");
    assert_eq!(reserved("c5.large")[0].1, tagged);

    // A claim allowed reserved capacity launches into the reservation.
    let launchable = Launchable {
        cluster: cluster.clone(),
        cloud,
        network,
        class,
        types,
    };
    let request = launchable.request("reserve-a", &["m5.large"], &["reserved", "on-demand"])?;
    let first = launchable.cloud.create(&request, SystemTime::now()).await?;
    assert_eq!(first.capacity_type, CapacityType::Reserved);
    assert_eq!(first.zone, "us-west-2a");
    let reservation = first.reservation.clone().context("a reservation")?;
    assert_eq!(reservation.id, mine);
    assert!(!reservation.interruptible);
    // EC2 says so too: the instance runs in the reservation, which has a slot less.
    let described = launchable.cloud.get(&first.provider_id).await?;
    assert_eq!(described.capacity_type, CapacityType::Reserved);
    assert_eq!(described.reservation, first.reservation);
    let ec2 = launchable.cloud.ec2();
    assert_eq!(available(ec2, &mine).await?, 1);

    // Someone else takes the last slot behind kerf's back: the launch finds the reservation full and the claim,
    // which may also go on-demand, is refused (it was planned into the reservation); the reservation is then
    // offered as full until EC2 lists it again.
    let image = first.image_id.clone();
    let subnet = first.subnet_id.clone().context("a subnet")?;
    ec2.run_instances()
        .image_id(image)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .subnet_id(subnet)
        .min_count(1)
        .max_count(1)
        .capacity_reservation_specification(
            aws_sdk_ec2::types::CapacityReservationSpecification::builder()
                .capacity_reservation_preference(
                    aws_sdk_ec2::types::CapacityReservationPreference::CapacityReservationsOnly,
                )
                .capacity_reservation_target(
                    aws_sdk_ec2::types::CapacityReservationTarget::builder()
                        .capacity_reservation_id(&mine)
                        .build(),
                )
                .build(),
        )
        .send()
        .await?;
    assert_eq!(available(ec2, &mine).await?, 0);
    let mut planned = node_claim("reserve-b", &["m5.large"], &["reserved"])?;
    planned.spec.requirements.push(serde_json::from_value(
        json!({"key": "karpenter.k8s.aws/capacity-reservation-id", "operator": "In", "values": [mine]}),
    )?);
    let request = kerf::cloud::LaunchRequest::from_node_claim(
        &planned,
        launchable.class.clone(),
        &launchable.types,
    )?;
    let full = launchable.cloud.create(&request, SystemTime::now()).await;
    assert!(
        matches!(full, Err(CloudError::InsufficientCapacity { .. })),
        "{full:?}"
    );
    let types = launchable
        .cloud
        .instance_types(&launchable.class, SystemTime::now())
        .await?;
    let offering = types
        .iter()
        .find(|t| t.name == "m5.large")
        .into_iter()
        .flat_map(|t| &t.offerings)
        .find(|o| o.capacity_type == CapacityType::Reserved)
        .context("the reserved offering")?;
    assert!(!offering.available, "{offering:?}");
    // A claim that may go on-demand does, from the listing before: kerf no longer tries the full reservation.
    let fallback = launchable.request("reserve-c", &["m5.large"], &["reserved", "on-demand"])?;
    let second = launchable
        .cloud
        .create(&fallback, SystemTime::now())
        .await?;
    assert_eq!(second.capacity_type, CapacityType::OnDemand);
    assert_eq!(second.reservation, None);

    // Terminating kerf's reserved instance frees its slot.
    launchable.cloud.delete(&first.provider_id).await?;
    assert_eq!(available(ec2, &mine).await?, 1);
    launchable.cloud.delete(&second.provider_id).await?;
    Ok(())
}

#[tokio::test]
async fn a_pending_pod_gets_a_node_launched_into_the_reservation_its_class_selects() -> Result<()> {
    // The capacity-type sync every 2 s instead of every minute, so the demotion below is seen quickly.
    let Some(bed) = Testbed::start_or_skip_with("a_pending_pod_gets_a_reserved_node", |_| {
        vec!["--reservation-sync-interval".to_owned(), "2s".to_owned()]
    })
    .await?
    else {
        return Ok(());
    };
    let id = unique_reservation_id();
    bed.emu
        .seed_capacity_reservations(&json!([
            {"CapacityReservationId": id, "InstanceType": "m5.large", "AvailabilityZone": "us-west-2a",
             "AvailableInstanceCount": 1, "Tags": {"karpenter.sh/discovery": bed.name}},
        ]))
        .await?;
    let mut spec = serde_json::to_value(node_class_spec(&bed.name)?)?;
    spec["capacityReservationSelectorTerms"] =
        json!([{"tags": {"karpenter.sh/discovery": bed.name}}]);
    apply_ok(
        &bed.cluster,
        &json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "default"}, "spec": spec}),
    )
    .await?;
    apply_ok(
        &bed.cluster,
        &json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "reserved"},
            "spec": {"template": {"metadata": {"labels": {"team": "e2e"}}, "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large", "c5.large"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}
                ],
                "expireAfter": "720h"
            }}}
        }),
    )
    .await?;

    // The class lists the reservation and says so.
    let classes: Api<EC2NodeClass> = Api::all(bed.cluster.client()?);
    let classes = &classes;
    let id_ref = &id;
    let status = poll(
        "the EC2NodeClass status to list the reservation",
        Duration::from_secs(60),
        || async move {
            let class = classes.get("default").await?;
            let status = class.status.unwrap_or_default();
            let listed = status
                .capacity_reservations
                .iter()
                .flatten()
                .any(|r| &r.id == id_ref);
            let ready = status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "CapacityReservationsReady" && c.status == "True");
            Ok((listed && ready).then_some(status))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    let listed = &status.capacity_reservations.clone().unwrap_or_default()[0];
    assert_eq!(
        (
            listed.instance_type.as_str(),
            listed.availability_zone.as_str()
        ),
        ("m5.large", "us-west-2a")
    );

    let namespace = bed.cluster.create_namespace("reserved").await?;
    create_inflate(&bed.cluster, &namespace, 1, "1", "1Gi").await?;
    let cluster = &bed.cluster;
    let claim_name = poll(
        "a NodeClaim for the pending pod",
        Duration::from_secs(90),
        || async move {
            let claims = node_claims(cluster).await?;
            Ok(claims.first().and_then(|c| c.metadata.name.clone()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    let claim = bed
        .wait_for_conditions(
            &claim_name,
            &["Launched", "Registered", "Initialized"],
            Duration::from_secs(120),
        )
        .await?;

    // The claim was planned into the reservation…
    let requirement = |key: &str| {
        claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == key)
            .and_then(|r| r.values.clone())
    };
    assert_eq!(
        requirement("karpenter.sh/capacity-type"),
        Some(vec!["reserved".to_owned()])
    );
    assert_eq!(
        requirement("karpenter.k8s.aws/capacity-reservation-id"),
        Some(vec![id.clone()])
    );
    // …its instance runs in it…
    let instances = bed.instances_of(&claim_name).await?;
    ensure!(instances.len() == 1, "one instance, got {instances:?}");
    let instance = &instances[0];
    assert_eq!(instance.capacity_type, CapacityType::Reserved);
    assert_eq!(
        instance.reservation.as_ref().map(|r| r.id.as_str()),
        Some(id.as_str())
    );
    assert_eq!(
        (instance.instance_type.as_str(), instance.zone.as_str()),
        ("m5.large", "us-west-2a")
    );
    assert_eq!(available(bed.cloud.ec2(), &id).await?, 0);
    // …and the claim and its node say so, as Karpenter labels them.
    let expected = [
        ("karpenter.sh/capacity-type", "reserved"),
        ("karpenter.k8s.aws/capacity-reservation-id", id.as_str()),
        ("karpenter.k8s.aws/capacity-reservation-type", "default"),
        (
            "karpenter.k8s.aws/capacity-reservation-interruptible",
            "false",
        ),
        ("node.kubernetes.io/instance-type", "m5.large"),
    ];
    let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
    let node_name = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .context("status.nodeName")?;
    let nodes: Api<Node> = Api::all(bed.cluster.client()?);
    let node_labels = nodes
        .get(&node_name)
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    for (key, value) in expected {
        assert_eq!(
            claim_labels.get(key).map(String::as_str),
            Some(value),
            "claim label {key}"
        );
        assert_eq!(
            node_labels.get(key).map(String::as_str),
            Some(value),
            "node label {key}"
        );
    }

    // The reservation ends (cancelled): the instance runs on as on-demand, and the claim and its node are demoted
    // (Karpenter's capacitytype controller: "should demote nodeclaims and nodes from reserved to on-demand").
    bed.emu.end_capacity_reservation(&id).await?;
    let claims: Api<NodeClaim> = Api::all(bed.cluster.client()?);
    let (claims, nodes) = (&claims, &nodes);
    let (claim_name, node_name) = (&claim_name, &node_name);
    let demoted = |labels: Option<std::collections::BTreeMap<String, String>>| {
        let labels = labels.unwrap_or_default();
        labels.get("karpenter.sh/capacity-type").map(String::as_str) == Some("on-demand")
            && !labels
                .keys()
                .any(|k| k.starts_with("karpenter.k8s.aws/capacity-reservation-"))
    };
    poll(
        "the claim and its node demoted to on-demand",
        Duration::from_secs(60),
        || async move {
            let claim = claims.get(claim_name).await?;
            let node = nodes.get(node_name).await?;
            Ok((demoted(claim.metadata.labels) && demoted(node.metadata.labels)).then_some(()))
        },
    )
    .await
    .with_context(|| format!("kerf controller log:\n{}", tail(&bed.log(), 40)))?;
    Ok(())
}
