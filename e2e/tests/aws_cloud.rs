//! kerf-aws against moto: EC2NodeClass resolution, instance types, launches (CreateFleet, launch
//! templates, tags), get/list/delete. Each test has its own cluster name and VPC on the shared emulator.
//! Fault injection (which is server-wide) is in `aws_faults.rs`, another process with its own emulator.

use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use aws_sdk_ec2::types::Filter;
use base64::Engine;
use kerf::catalog::{CapacityType, Catalog, CatalogSettings, Pricing};
use kerf::cloud::{CloudError, CloudProvider};
use kerf_e2e::aws::{node_class_spec, AwsEmu, Launchable};

#[tokio::test]
async fn a_node_class_resolves_to_its_subnets_security_group_and_newest_amis() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("a_node_class_resolves")? else {
        return Ok(());
    };
    let Launchable {
        cluster,
        cloud,
        network,
        class,
        ..
    } = emu.launchable("resolve").await?;
    let subnets: Vec<(String, String)> = class
        .resolved
        .subnets
        .iter()
        .map(|s| (s.subnet.id.clone(), s.subnet.zone.clone()))
        .collect();
    let mut expected = network.subnets.clone();
    expected.sort();
    assert_eq!(subnets, expected);
    assert!(class
        .resolved
        .subnets
        .iter()
        .all(|s| s.subnet.zone_id.is_some() && s.available_ips > 4000));
    let groups: Vec<_> = class
        .resolved
        .security_groups
        .iter()
        .map(|g| g.id.clone())
        .collect();
    assert_eq!(groups, std::slice::from_ref(&network.security_group_id));
    // `role` gets an instance profile kerf manages for the class (the emulator holds the role).
    let profile = class.resolved.instance_profile.clone().unwrap_or_default();
    assert!(profile.starts_with(&format!("{cluster}_")), "{profile}");
    let again = cloud
        .resolve_node_class("default", &node_class_spec(&cluster)?)
        .await?;
    assert_eq!(again.resolved.instance_profile.as_ref(), Some(&profile));
    // Resolutions racing to create one class's profile (the class status and the provisioner do, and so do
    // two replicas) all succeed: the losers find the role they failed to add already there.
    let spec = node_class_spec(&cluster)?;
    let mut racers = Vec::new();
    for _ in 0..4 {
        racers.push(emu.cloud(&cluster, Duration::from_secs(30)).await?);
    }
    let resolved =
        futures::future::join_all(racers.iter().map(|c| c.resolve_node_class("racing", &spec)))
            .await;
    let profiles = resolved
        .into_iter()
        .map(|class| Ok(class?.resolved.instance_profile))
        .collect::<Result<std::collections::BTreeSet<_>>>()?;
    assert_eq!(profiles.len(), 1, "one profile for the class: {profiles:?}");
    // The seeded SSM parameters of al2023@latest name these AMIs (e2e/scripts/aws-emu/): the x86_64 image is
    // published as standard and NVIDIA, so it boots GPU types too; no Neuron or arm64 NVIDIA image is seeded.
    use kerf::cloud::AmiVariant::{Nvidia, Standard};
    let amis: Vec<_> = class
        .resolved
        .amis
        .iter()
        .map(|a| (a.architecture.as_str(), a.id.as_str(), a.variants.clone()))
        .collect();
    assert_eq!(
        amis,
        [
            ("arm64", "ami-0eks130arm00001", vec![Standard]),
            ("x86_64", "ami-0eks130x86000001", vec![Standard, Nvidia])
        ]
    );

    // The same by IDs, a security group name and AMI tags.
    let by_ids = serde_json::from_value(serde_json::json!({
        "amiSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
        "subnetSelectorTerms": [{"id": network.subnets[0].0}],
        "securityGroupSelectorTerms": [{"name": format!("{cluster}-nodes")}],
    }))?;
    let class = cloud.resolve_node_class("by-ids", &by_ids).await?;
    assert_eq!(class.resolved.subnets.len(), 1);
    assert_eq!(
        class.resolved.security_groups[0].id,
        network.security_group_id
    );
    assert_eq!(class.resolved.amis.len(), 2);

    // A role IAM does not have leaves the class not ready, naming the role.
    let mut no_role = node_class_spec(&cluster)?;
    no_role.role = Some("NoSuchRole".to_owned());
    match cloud.resolve_node_class("no-role", &no_role).await {
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            assert!(reason.contains("NoSuchRole"), "{reason}");
        }
        other => panic!("expected NodeClassNotReady, got {other:?}"),
    }

    // An instance profile of the class's own is used when IAM has it; one it does not have leaves the class not
    // ready, naming it, instead of launching instances EC2 would refuse.
    let existing = class_with_profile(&cluster, &profile)?;
    let class = cloud.resolve_node_class("own-profile", &existing).await?;
    assert_eq!(
        class.resolved.instance_profile.as_deref(),
        Some(profile.as_str())
    );
    let missing = class_with_profile(&cluster, "NoSuchProfile")?;
    match cloud.resolve_node_class("no-profile", &missing).await {
        Err(CloudError::NodeClassNotReady { reason, .. }) => {
            assert_eq!(
                reason,
                format!("{}: NoSuchProfile", kerf::cloud::NO_INSTANCE_PROFILE)
            );
        }
        other => panic!("expected NodeClassNotReady, got {other:?}"),
    }

    // Selectors that match nothing leave the class not ready.
    let nothing = node_class_spec("no-such-cluster")?;
    match cloud.resolve_node_class("nothing", &nothing).await {
        Err(CloudError::NodeClassNotReady { name, reason }) => {
            assert_eq!(name, "nothing");
            assert!(reason.contains("subnet"), "{reason}");
        }
        other => panic!("expected NodeClassNotReady, got {other:?}"),
    }
    Ok(())
}

/// An `ssmParameter` AMI term resolves to the one image its parameter holds (Karpenter's AMI provider reads the
/// parameter and describes that image id): never to every image DescribeImages would list without a filter. A
/// missing parameter, or one that holds anything but an image id, leaves the class not ready with the
/// parameter named (its `AMIsReady` condition says so).
#[tokio::test]
async fn an_ssm_parameter_term_resolves_to_exactly_the_image_it_names() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("an_ssm_parameter_term")? else {
        return Ok(());
    };
    let Launchable { cluster, cloud, .. } = emu.launchable("ssm-term").await?;
    let not_an_image = format!("/aws/service/kerf-e2e/{cluster}/not-an-image");
    emu.seed_ssm(&serde_json::json!({ not_an_image.as_str(): "hello" }))
        .await?;
    let with_term = |term: serde_json::Value| {
        let mut spec = serde_json::to_value(node_class_spec(&cluster)?)?;
        spec["amiSelectorTerms"] = serde_json::json!([term]);
        anyhow::Ok(serde_json::from_value::<
            kerf::api::ec2nodeclass::EC2NodeClassSpec,
        >(spec)?)
    };
    let x86 = "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/recommended/image_id";
    let class = cloud
        .resolve_node_class("ssm", &with_term(serde_json::json!({"ssmParameter": x86}))?)
        .await?;
    let amis: Vec<(&str, &str)> = class
        .resolved
        .amis
        .iter()
        .map(|a| (a.architecture.as_str(), a.id.as_str()))
        .collect();
    assert_eq!(amis, [("x86_64", "ami-0eks130x86000001")]);
    for (parameter, want) in [
        (
            format!("/aws/service/kerf-e2e/{cluster}/missing"),
            "does not exist",
        ),
        (not_an_image.clone(), "holds \"hello\", not an image id"),
    ] {
        let spec = with_term(serde_json::json!({ "ssmParameter": parameter }))?;
        match cloud.resolve_node_class("ssm-bad", &spec).await {
            Err(CloudError::NodeClassNotReady { reason, .. }) => assert!(
                reason.starts_with("no AMI matches amiSelectorTerms: ssmParameter")
                    && reason.contains(&parameter)
                    && reason.contains(want),
                "{reason}"
            ),
            other => panic!("{parameter}: expected NodeClassNotReady, got {other:?}"),
        }
    }
    Ok(())
}

/// Without `--cluster-endpoint`, the endpoint nodes join comes from EKS `DescribeCluster` on the cluster's name,
/// with the CA bundle where it is not configured (Karpenter's operator resolves the endpoint so); a configured
/// endpoint is used as is, and a cluster EKS does not know stops the start with the flag named.
#[tokio::test]
async fn an_unset_cluster_endpoint_is_discovered_from_eks() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("an_unset_cluster_endpoint")? else {
        return Ok(());
    };
    let name = kerf_e2e::aws::unique_cluster_name("discover");
    let described = emu.create_eks_cluster(&name).await?;
    let want_endpoint = described
        .endpoint
        .clone()
        .context("moto gives an endpoint")?;
    let want_ca = described.certificate_authority.and_then(|ca| ca.data);

    let mut settings = emu.settings(&name, Duration::from_secs(30))?;
    settings.cluster.endpoint = String::new();
    settings.cluster.ca_bundle = None;
    let cloud = kerf_aws::AwsCloud::connect(settings.clone()).await?;
    assert_eq!(cloud.cluster().endpoint, want_endpoint);
    assert_eq!(cloud.cluster().ca_bundle, want_ca);
    assert_eq!(
        cloud.cluster().cidr.as_deref(),
        Some("10.100.0.0/16"),
        "a configured CIDR stays"
    );

    let mut configured = settings.clone();
    configured.cluster.endpoint = "https://configured.example:443".to_owned();
    let cloud = kerf_aws::AwsCloud::connect(configured).await?;
    assert_eq!(cloud.cluster().endpoint, "https://configured.example:443");

    let mut unknown = settings;
    unknown.cluster.name = format!("{name}-unknown");
    match kerf_aws::AwsCloud::connect(unknown).await {
        Err(CloudError::Api {
            operation, message, ..
        }) => {
            assert_eq!(operation, "DescribeCluster");
            assert!(message.contains("--cluster-endpoint"), "{message}");
        }
        Err(other) => panic!("expected a DescribeCluster error, got {other}"),
        Ok(_) => panic!("an unknown cluster was accepted"),
    }
    Ok(())
}

/// The names of the launch templates kerf made for `cluster`.
async fn template_names(cloud: &kerf_aws::AwsCloud, cluster: &str) -> Result<Vec<String>> {
    let templates = cloud
        .ec2()
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:eks:eks-cluster-name")
                .values(cluster)
                .build(),
        )
        .send()
        .await?;
    Ok(templates
        .launch_templates()
        .iter()
        .filter_map(|t| t.launch_template_name().map(str::to_owned))
        .collect())
}

/// The data of the one launch template the launches of `cluster` made (all shared one configuration), read back
/// with DescribeLaunchTemplateVersions.
async fn only_template(
    cloud: &kerf_aws::AwsCloud,
    cluster: &str,
) -> Result<aws_sdk_ec2::types::ResponseLaunchTemplateData> {
    let names = template_names(cloud, cluster).await?;
    anyhow::ensure!(names.len() == 1, "one template: {names:?}");
    anyhow::ensure!(names[0].starts_with("karpenter.k8s.aws/"), "{names:?}");
    let versions = cloud
        .ec2()
        .describe_launch_template_versions()
        .launch_template_name(&names[0])
        .versions("$Latest")
        .send()
        .await?;
    versions
        .launch_template_versions()
        .first()
        .and_then(|v| v.launch_template_data())
        .cloned()
        .context("template data")
}

/// The test class of `cluster` with `spec.instanceProfile` instead of `spec.role`.
fn class_with_profile(
    cluster: &str,
    profile: &str,
) -> Result<kerf::api::ec2nodeclass::EC2NodeClassSpec> {
    let mut spec = node_class_spec(cluster)?;
    spec.role = None;
    spec.instance_profile = Some(profile.to_owned());
    Ok(spec)
}

#[tokio::test]
async fn instance_types_come_from_ec2_with_offerings_in_the_class_zones() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("instance_types_come_from_ec2")? else {
        return Ok(());
    };
    let types = emu.launchable("types").await?.types;
    assert!(
        types.len() > 500,
        "moto knows well over 500 types, got {}",
        types.len()
    );
    let m5 = types
        .iter()
        .find(|t| t.name == "m5.large")
        .context("m5.large")?;
    let mut offerings: Vec<_> = m5
        .offerings
        .iter()
        .map(|o| {
            (
                o.zone.as_str(),
                o.capacity_type,
                o.price,
                o.available,
                o.zone_id.is_some(),
            )
        })
        .collect();
    offerings.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    assert_eq!(
        offerings,
        [
            (
                "us-west-2a",
                CapacityType::OnDemand,
                Some(0.096),
                true,
                true
            ),
            ("us-west-2a", CapacityType::Spot, Some(0.04), true, true),
            (
                "us-west-2b",
                CapacityType::OnDemand,
                Some(0.096),
                true,
                true
            ),
            ("us-west-2b", CapacityType::Spot, Some(0.04), true, true),
        ]
    );
    // The same facts as the embedded catalog (generated from moto's data), so the same capacity.
    let embedded = Catalog::embedded("us-west-2", &CatalogSettings::default(), &Pricing::none())?;
    let reference = embedded.get("m5.large").context("embedded m5.large")?;
    assert_eq!(m5.capacity, reference.capacity);
    assert_eq!(m5.overhead, reference.overhead);
    Ok(())
}

#[tokio::test]
async fn a_launch_runs_the_cheapest_type_tagged_from_one_reused_launch_template() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("a_launch_runs_the_cheapest_type")? else {
        return Ok(());
    };
    let launchable = emu.launchable("launch").await?;
    let (cluster, cloud, network) = (&launchable.cluster, &launchable.cloud, &launchable.network);

    let mut launched = Vec::new();
    for name in ["default-a", "default-b"] {
        let request =
            launchable.request(name, &["m5.xlarge", "m5.large", "c5.large"], &["on-demand"])?;
        launched.push(cloud.create(&request, SystemTime::now()).await?);
    }
    for (instance, claim) in launched.iter().zip(["default-a", "default-b"]) {
        assert_eq!(instance.instance_type, "c5.large");
        assert_eq!(instance.capacity_type, CapacityType::OnDemand);
        assert_eq!(instance.image_id, "ami-0eks130x86000001");
        assert_eq!(
            instance.provider_id,
            format!("aws:///{}/{}", instance.zone, instance.id)
        );
        let got = cloud.get(&instance.provider_id).await?;
        assert_eq!(got.instance_type, "c5.large");
        assert_eq!(got.zone, instance.zone);
        assert!(network
            .subnets
            .iter()
            .any(|(id, _)| Some(id) == got.subnet_id.as_ref()));
        for (key, value) in [
            ("karpenter.sh/nodeclaim", claim),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("eks:eks-cluster-name", cluster.as_str()),
            (format!("kubernetes.io/cluster/{cluster}").as_str(), "owned"),
            ("team", "e2e"),
        ] {
            assert_eq!(
                got.tags.get(key).map(String::as_str),
                Some(value),
                "tag {key}"
            );
        }
    }
    let listed: Vec<_> = cloud.list().await?.into_iter().map(|i| i.id).collect();
    let mut expected: Vec<_> = launched.iter().map(|i| i.id.clone()).collect();
    expected.sort();
    let mut listed_sorted = listed.clone();
    listed_sorted.sort();
    assert_eq!(
        listed_sorted, expected,
        "list shows this cluster's instances only"
    );

    // Both launches share one configuration, hence one template.
    let data = only_template(cloud, cluster).await?;
    let names = template_names(cloud, cluster).await?;
    let user_data = String::from_utf8(
        base64::engine::general_purpose::STANDARD.decode(data.user_data().context("user data")?)?,
    )?;
    let (labels, taints) = kerf_aws::registration(&user_data).context("a NodeConfig")?;
    assert_eq!(labels.get("team").map(String::as_str), Some("e2e"));
    assert_eq!(
        labels.get("karpenter.sh/capacity-type").map(String::as_str),
        Some("on-demand")
    );
    let taints: Vec<_> = taints
        .iter()
        .map(|t| (t.key.as_str(), t.effect.as_str()))
        .collect();
    assert_eq!(
        taints,
        [
            ("dedicated", "NoSchedule"),
            ("karpenter.sh/unregistered", "NoExecute")
        ]
    );

    // Garbage collection keeps the template this process uses, and removes it an hour later for a process
    // that does not use it.
    let hour_later = SystemTime::now() + std::time::Duration::from_secs(3600);
    assert_eq!(cloud.collect_garbage(hour_later).await?, 0);
    let fresh = emu
        .cloud(cluster, std::time::Duration::from_secs(30))
        .await?;
    assert_eq!(fresh.collect_garbage(hour_later).await?, 1);
    let left = cloud
        .ec2()
        .describe_launch_templates()
        .launch_template_names(&names[0])
        .send()
        .await;
    assert!(
        left.map_or(true, |out| out.launch_templates().is_empty()),
        "the template is gone"
    );
    Ok(())
}

#[tokio::test]
async fn deleting_terminates_and_then_reports_not_found() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("deleting_terminates")? else {
        return Ok(());
    };
    let launchable = emu.launchable("delete").await?;
    let cloud = &launchable.cloud;
    let request = launchable.request("default-del", &["m5.large"], &["spot"])?;
    let instance = cloud.create(&request, SystemTime::now()).await?;
    assert_eq!(instance.capacity_type, CapacityType::Spot);
    assert_eq!(
        cloud.get(&instance.provider_id).await?.capacity_type,
        CapacityType::Spot
    );

    cloud.delete(&instance.provider_id).await?;
    let not_found = CloudError::NotFound {
        provider_id: instance.provider_id.clone(),
    };
    assert_eq!(
        cloud.get(&instance.provider_id).await.unwrap_err(),
        not_found
    );
    assert_eq!(
        cloud.delete(&instance.provider_id).await.unwrap_err(),
        not_found
    );
    assert!(cloud.list().await?.is_empty());
    let unknown = "aws:///us-west-2a/i-0123456789abcdef0";
    assert!(matches!(
        cloud.get(unknown).await,
        Err(CloudError::NotFound { .. })
    ));
    assert!(matches!(
        cloud.delete(unknown).await,
        Err(CloudError::NotFound { .. })
    ));
    Ok(())
}

/// The EC2NodeClass fields that only matter to EC2 reach the launch template, read back with
/// DescribeLaunchTemplateVersions: the EBS volume's IOPS, throughput, KMS key, snapshot and initialization rate;
/// a network interface (device index 0) carrying the security groups, the public-address choice, the prefix
/// count and the connection tracking timeouts; detailed monitoring; nested virtualization. moto 5.2.5 stores and
/// returns the template data as sent, but ignores CreateFleet's `Context` (nothing reads it back): that one is
/// asserted on the request in `aws/src/fleet.rs`'s unit tests.
#[tokio::test]
async fn a_class_s_ebs_network_and_monitoring_fields_reach_the_launch_template() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("a_class_s_ebs_network_and_monitoring_fields")? else {
        return Ok(());
    };
    let mut launchable = emu.launchable("lt-fields").await?;
    let mut spec = serde_json::to_value(&launchable.class.spec)?;
    let fields = serde_json::json!({
        "blockDeviceMappings": [{
            "deviceName": "/dev/xvda",
            "rootVolume": true,
            "ebs": {
                "volumeSize": "40Gi", "volumeType": "gp3", "encrypted": true, "deleteOnTermination": true,
                "iops": 4000, "throughput": 250, "kmsKeyID": "arn:aws:kms:us-west-2:123456789012:key/kerf-e2e",
                "snapshotID": "snap-0123456789abcdef0", "volumeInitializationRate": 200
            }
        }],
        "associatePublicIPAddress": true,
        "ipPrefixCount": 1,
        "detailedMonitoring": true,
        "cpuOptions": {"nestedVirtualization": "enabled"},
        "connectionTracking": {"tcpEstablishedTimeout": 3600, "udpStreamTimeout": 120, "udpTimeout": 45},
        "context": "kerf-e2e-context"
    });
    for (key, value) in fields.as_object().context("fields")? {
        spec[key] = value.clone();
    }
    launchable.class.spec = serde_json::from_value(spec)?;
    let (cluster, cloud, network) = (&launchable.cluster, &launchable.cloud, &launchable.network);

    for name in ["fields-a", "fields-b"] {
        let request = launchable.request(name, &["c5.large"], &["on-demand"])?;
        cloud.create(&request, SystemTime::now()).await?;
    }
    // One configuration, one template, reused by the second launch.
    let data = only_template(cloud, cluster).await?;
    let [mapping] = data.block_device_mappings() else {
        panic!("one block device: {data:#?}")
    };
    assert_eq!(mapping.device_name(), Some("/dev/xvda"));
    let ebs = mapping.ebs().context("an EBS volume")?;
    assert_eq!(ebs.volume_size(), Some(40));
    assert_eq!(ebs.iops(), Some(4000));
    assert_eq!(ebs.throughput(), Some(250));
    assert_eq!(
        ebs.kms_key_id(),
        Some("arn:aws:kms:us-west-2:123456789012:key/kerf-e2e")
    );
    assert_eq!(ebs.snapshot_id(), Some("snap-0123456789abcdef0"));
    assert_eq!(ebs.volume_initialization_rate(), Some(200));

    let [interface] = data.network_interfaces() else {
        panic!("one network interface: {data:#?}")
    };
    assert_eq!(interface.device_index(), Some(0));
    assert_eq!(interface.associate_public_ip_address(), Some(true));
    assert_eq!(interface.groups(), [network.security_group_id.as_str()]);
    assert_eq!(interface.ipv4_prefix_count(), Some(1));
    let tracking = interface
        .connection_tracking_specification()
        .context("connection tracking")?;
    assert_eq!(
        (
            tracking.tcp_established_timeout(),
            tracking.udp_stream_timeout(),
            tracking.udp_timeout()
        ),
        (Some(3600), Some(120), Some(45))
    );
    assert!(
        data.security_group_ids().is_empty(),
        "the groups are on the interface only: {data:#?}"
    );

    assert_eq!(data.monitoring().and_then(|m| m.enabled()), Some(true));
    assert_eq!(
        data.cpu_options()
            .and_then(|c| c.nested_virtualization())
            .map(|n| n.as_str()),
        Some("enabled")
    );
    Ok(())
}

/// `spec.networkInterfaces` reaches the launch template as listed (issue 18): each interface on its network card and
/// device with its type, the security groups on both, and the address settings (public address, prefix count)
/// only on the interface that has addresses, not on the EFA-only one. Read back with DescribeLaunchTemplateVersions.
#[tokio::test]
async fn listed_network_interfaces_reach_the_launch_template() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("listed_network_interfaces_reach_the_launch_template")?
    else {
        return Ok(());
    };
    let mut launchable = emu.launchable("lt-nics").await?;
    let mut spec = serde_json::to_value(&launchable.class.spec)?;
    spec["networkInterfaces"] = serde_json::json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}
    ]);
    spec["associatePublicIPAddress"] = serde_json::json!(false);
    spec["ipPrefixCount"] = serde_json::json!(1);
    launchable.class.spec = serde_json::from_value(spec)?;
    let (cluster, cloud, network) = (&launchable.cluster, &launchable.cloud, &launchable.network);
    let request = launchable.request("nics-a", &["c5.large"], &["on-demand"])?;
    cloud.create(&request, SystemTime::now()).await?;

    let data = only_template(cloud, cluster).await?;
    let [primary, efa] = data.network_interfaces() else {
        panic!("two network interfaces: {data:#?}")
    };
    let group = [network.security_group_id.as_str()];
    assert_eq!(
        (
            primary.network_card_index(),
            primary.device_index(),
            primary.interface_type()
        ),
        (Some(0), Some(0), Some("interface"))
    );
    assert_eq!(primary.groups(), group);
    assert_eq!(primary.associate_public_ip_address(), Some(false));
    assert_eq!(primary.ipv4_prefix_count(), Some(1));
    assert_eq!(
        (
            efa.network_card_index(),
            efa.device_index(),
            efa.interface_type()
        ),
        (Some(1), Some(1), Some("efa-only"))
    );
    assert_eq!(efa.groups(), group);
    assert_eq!(efa.associate_public_ip_address(), None);
    assert_eq!(efa.ipv4_prefix_count(), None);
    Ok(())
}

/// A claim requesting `vpc.amazonaws.com/efa` on a class that lists no interfaces launches with one EFA interface
/// per network card of its type (c6in.32xlarge has two), read back from the launch template.
#[tokio::test]
async fn a_claim_requesting_efa_launches_with_an_efa_interface_per_card() -> Result<()> {
    let Some(emu) =
        AwsEmu::shared_or_skip("a_claim_requesting_efa_launches_with_an_efa_interface_per_card")?
    else {
        return Ok(());
    };
    let launchable = emu.launchable("lt-efa").await?;
    let (cluster, cloud) = (&launchable.cluster, &launchable.cloud);
    let mut request = launchable.request("efa-a", &["c6in.32xlarge"], &["on-demand"])?;
    request.efa_requested = true;
    cloud.create(&request, SystemTime::now()).await?;

    let data = only_template(cloud, cluster).await?;
    let interfaces: Vec<_> = data
        .network_interfaces()
        .iter()
        .map(|i| (i.network_card_index(), i.device_index(), i.interface_type()))
        .collect();
    assert_eq!(
        interfaces,
        [
            (Some(0), Some(0), Some("efa")),
            (Some(1), Some(1), Some("efa"))
        ],
        "{data:#?}"
    );
    Ok(())
}

/// Karpenter's placement group suites, against the emulator's placement groups (moto has none;
/// e2e/scripts/aws-emu/moto_emu.py adds them): a class resolves the group it names (by name or ID) and is not ready
/// for one that does not exist; its instance types carry the group's labels and exclude types that cannot join
/// its strategy; a launch goes into the group (the template's placement), into the partition the claim requires,
/// and EC2 reports the partition it chose for one that required none.
#[tokio::test]
async fn a_class_selecting_a_placement_group_launches_into_it() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("a_class_selecting_a_placement_group_launches_into_it")?
    else {
        return Ok(());
    };
    let mut launchable = emu.launchable("pg").await?;
    let cluster = launchable.cluster.clone();
    let ec2 = launchable.cloud.ec2().clone();
    let create = |name: String, strategy: aws_sdk_ec2::types::PlacementStrategy| {
        let request = ec2
            .create_placement_group()
            .group_name(name)
            .strategy(strategy.clone());
        let request = if strategy == aws_sdk_ec2::types::PlacementStrategy::Partition {
            request.partition_count(3)
        } else {
            request
        };
        async move {
            anyhow::Ok(
                request
                    .send()
                    .await?
                    .placement_group()
                    .and_then(|g| g.group_id().map(str::to_owned))
                    .context("group id")?,
            )
        }
    };
    let partitioned = create(
        format!("{cluster}-hpc"),
        aws_sdk_ec2::types::PlacementStrategy::Partition,
    )
    .await?;
    let clustered = create(
        format!("{cluster}-near"),
        aws_sdk_ec2::types::PlacementStrategy::Cluster,
    )
    .await?;
    let cloud = &launchable.cloud;
    let selecting = |selector: serde_json::Value| -> Result<_> {
        let mut spec = node_class_spec(&cluster)?;
        spec.placement_group_selector = Some(serde_json::from_value(selector)?);
        Ok(spec)
    };

    // Upstream "should fail when the placement group is not found": not ready, with Karpenter's message.
    let missing = cloud
        .resolve_node_class(
            "default",
            &selecting(serde_json::json!({"name": "no-such-group"}))?,
        )
        .await;
    match missing {
        Err(CloudError::NodeClassNotReady { reason, .. }) => assert!(
            reason.ends_with("Placement group \"no-such-group\" not found"),
            "{reason}"
        ),
        other => anyhow::bail!("expected not ready, got {other:?}"),
    }

    // A cluster group: types that cannot join one (burstable t3) are not offered.
    let near = cloud
        .resolve_node_class("default", &selecting(serde_json::json!({"id": clustered}))?)
        .await?;
    let group = near.resolved.placement_group.clone().context("resolved")?;
    assert_eq!(
        (group.id.as_str(), group.strategy),
        (clustered.as_str(), kerf::cloud::PlacementStrategy::Cluster)
    );
    let types = cloud.instance_types(&near, SystemTime::now()).await?;
    assert!(types.iter().any(|t| t.name == "m5.large"));
    assert!(
        !types.iter().any(|t| t.name == "t3.micro"),
        "t3 supports no cluster groups"
    );

    // A partition group by name: every type carries the group and its three partitions.
    let hpc = cloud
        .resolve_node_class(
            "default",
            &selecting(serde_json::json!({"name": format!("{cluster}-hpc")}))?,
        )
        .await?;
    let group = hpc.resolved.placement_group.clone().context("resolved")?;
    assert_eq!(
        (group.id.as_str(), group.partition_count),
        (partitioned.as_str(), 3)
    );
    launchable.types = cloud.instance_types(&hpc, SystemTime::now()).await?;
    launchable.class = hpc;
    let m5 = launchable
        .types
        .iter()
        .find(|t| t.name == "m5.large")
        .context("m5.large")?;
    let values = |key: &str| {
        m5.requirements
            .get(key)
            .and_then(|r| r.values())
            .map(|v| v.iter().cloned().collect::<Vec<_>>())
    };
    assert_eq!(
        values("karpenter.k8s.aws/placement-group-id"),
        Some(vec![partitioned.clone()])
    );
    assert_eq!(
        values("karpenter.k8s.aws/placement-group-partition"),
        Some(vec!["1".to_owned(), "2".to_owned(), "3".to_owned()])
    );

    // A claim requiring partitions 2 or 3 goes into the lowest; one requiring none lets EC2 choose.
    let mut claim = kerf_e2e::aws::node_claim("pg-a", &["m5.large"], &["on-demand"])?;
    claim.spec.requirements.push(serde_json::from_value(serde_json::json!({
        "key": "karpenter.k8s.aws/placement-group-partition", "operator": "In", "values": ["3", "2"]
    }))?);
    let request = kerf::cloud::LaunchRequest::from_node_claim(
        &claim,
        launchable.class.clone(),
        &launchable.types,
    )?;
    let pinned = cloud.create(&request, SystemTime::now()).await?;
    let placement = pinned.placement.clone().context("placed")?;
    assert_eq!(
        (placement.group_id.as_str(), placement.partition),
        (partitioned.as_str(), Some(2))
    );
    let free = cloud
        .create(
            &launchable.request("pg-b", &["m5.large"], &["on-demand"])?,
            SystemTime::now(),
        )
        .await?;
    assert_eq!(
        free.placement.as_ref().map(|p| p.partition),
        Some(None),
        "EC2 chooses"
    );

    // Read back from EC2: the templates' placement, and the partition of each instance.
    let mut placements = Vec::new();
    for name in template_names(cloud, &cluster).await? {
        let versions = ec2
            .describe_launch_template_versions()
            .launch_template_name(&name)
            .versions("$Latest")
            .send()
            .await?;
        let placement = versions
            .launch_template_versions()
            .first()
            .and_then(|v| v.launch_template_data())
            .and_then(|d| d.placement())
            .map(|p| (p.group_id().map(str::to_owned), p.partition_number()));
        placements.push(placement);
    }
    placements.sort();
    assert_eq!(
        placements,
        [
            Some((Some(partitioned.clone()), None)),
            Some((Some(partitioned.clone()), Some(2)))
        ]
    );
    let described = cloud.get(&free.provider_id).await?;
    let chosen = described.placement.and_then(|p| p.partition);
    assert!(matches!(chosen, Some(1..=3)), "{chosen:?}");
    assert_eq!(
        cloud
            .get(&pinned.provider_id)
            .await?
            .placement
            .and_then(|p| p.partition),
        Some(2)
    );
    Ok(())
}

/// The client-side call budget against the emulator: with DescribeInstances at 4 calls per second and a bucket of
/// 1, five reads take at least a second, every one is answered (none throttled by EC2), and other APIs are not
/// held up.
#[tokio::test]
async fn calls_past_an_apis_budget_are_paced_not_refused() -> Result<()> {
    let Some(emu) = AwsEmu::shared_or_skip("calls_past_an_apis_budget_are_paced_not_refused")?
    else {
        return Ok(());
    };
    let launchable = emu.launchable("budget").await?;
    let instance = launchable
        .cloud
        .create(
            &launchable.request("budget-a", &["m5.large"], &["on-demand"])?,
            SystemTime::now(),
        )
        .await?;
    let mut settings = emu.settings(&launchable.cluster, Duration::from_secs(30))?;
    settings.api_rate_limits =
        kerf::cloud::api_limits::ApiRateLimits::parse("DescribeInstances=4:1")
            .map_err(anyhow::Error::msg)?;
    let paced = kerf_aws::AwsCloud::connect(settings).await?;
    let started = std::time::Instant::now();
    for _ in 0..5 {
        let got = paced.get(&instance.provider_id).await?;
        assert_eq!(got.id, instance.id);
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(950),
        "5 calls at 4/s after a burst of 1: {took:?}"
    );
    let started = std::time::Instant::now();
    paced
        .resolve_node_class("default", &node_class_spec(&launchable.cluster)?)
        .await?;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "resolution is not paced by DescribeInstances"
    );
    Ok(())
}
