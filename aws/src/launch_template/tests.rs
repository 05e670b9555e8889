use super::*;

fn launch(ipv6: bool) -> Launch {
    Launch {
        image_id: "ami-1".into(),
        user_data: "data".into(),
        security_group_ids: vec!["sg-1".into(), "sg-2".into()],
        instance_profile: Some("profile".into()),
        tags: BTreeMap::new(),
        efa_interfaces: 0,
        ipv6,
        targeting: Targeting::Open,
        placement: None,
    }
}

fn config() -> TemplateConfig {
    TemplateConfig::new(&EC2NodeClassSpec::default(), launch(false))
}

/// A class setting every field that reaches the launch template beyond the defaults.
fn full_spec() -> EC2NodeClassSpec {
    serde_json::from_value(serde_json::json!({
        "blockDeviceMappings": [{
            "deviceName": "/dev/xvdb",
            "rootVolume": true,
            "ebs": {
                "volumeSize": "100Gi", "volumeType": "gp3", "encrypted": true, "deleteOnTermination": false,
                "iops": 4000, "throughput": 250, "kmsKeyID": "arn:aws:kms:us-west-2:111122223333:key/k-1",
                "snapshotID": "snap-0123456789abcdef0", "volumeInitializationRate": 200
            }
        }],
        "associatePublicIPAddress": true,
        "ipPrefixCount": 2,
        "detailedMonitoring": true,
        "cpuOptions": {"nestedVirtualization": "enabled"},
        "connectionTracking": {"tcpEstablishedTimeout": 3600, "udpStreamTimeout": 120, "udpTimeout": 45},
    }))
    .unwrap()
}

#[test]
fn a_class_s_ebs_interface_monitoring_and_cpu_fields_reach_the_template_data() {
    let data = TemplateConfig::new(&full_spec(), launch(false)).data();

    let [mapping] = data.block_device_mappings() else {
        panic!("one mapping: {data:?}")
    };
    assert_eq!(mapping.device_name(), Some("/dev/xvdb"));
    let ebs = mapping.ebs().unwrap();
    assert_eq!(ebs.volume_size(), Some(100));
    assert_eq!(ebs.volume_type(), Some(&ec2::VolumeType::Gp3));
    assert_eq!(ebs.encrypted(), Some(true));
    assert_eq!(ebs.delete_on_termination(), Some(false));
    assert_eq!(ebs.iops(), Some(4000));
    assert_eq!(ebs.throughput(), Some(250));
    assert_eq!(
        ebs.kms_key_id(),
        Some("arn:aws:kms:us-west-2:111122223333:key/k-1")
    );
    assert_eq!(ebs.snapshot_id(), Some("snap-0123456789abcdef0"));
    assert_eq!(ebs.volume_initialization_rate(), Some(200));

    // The security groups move onto the interface: EC2 refuses both.
    assert!(data.security_group_ids().is_empty(), "{data:?}");
    let [interface] = data.network_interfaces() else {
        panic!("one interface: {data:?}")
    };
    assert_eq!(interface.device_index(), Some(0));
    assert_eq!(interface.associate_public_ip_address(), Some(true));
    assert_eq!(interface.groups(), ["sg-1", "sg-2"]);
    assert_eq!(interface.ipv4_prefix_count(), Some(2));
    assert_eq!(interface.ipv6_prefix_count(), None);
    assert_eq!(interface.primary_ipv6(), None);
    let tracking = interface.connection_tracking_specification().unwrap();
    assert_eq!(tracking.tcp_established_timeout(), Some(3600));
    assert_eq!(tracking.udp_stream_timeout(), Some(120));
    assert_eq!(tracking.udp_timeout(), Some(45));

    assert_eq!(data.monitoring().and_then(|m| m.enabled()), Some(true));
    assert_eq!(
        data.cpu_options().and_then(|c| c.nested_virtualization()),
        Some(&ec2::NestedVirtualizationSpecification::Enabled)
    );
    assert_eq!(
        data.iam_instance_profile().and_then(|p| p.name()),
        Some("profile")
    );
}

/// Upstream: `cloudprovider/suite_test.go` (EFA) "should include vpc.amazonaws.com/efa on a nodeclaim if
/// nodeclass configured with EFA-only interfaces" and "... only interface (ENA) network interfaces", the launch
/// template half: each listed interface is sent on its card and device with its type; an EFA-only one
/// carries the security groups and nothing that needs an address.
#[test]
fn listed_network_interfaces_become_the_templates_interfaces() {
    let mut spec = full_spec();
    spec.network_interfaces = serde_json::from_value(serde_json::json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"},
    ]))
    .expect("interfaces");
    for ipv6 in [false, true] {
        let data = TemplateConfig::new(&spec, launch(ipv6)).data();
        let [primary, efa] = data.network_interfaces() else {
            panic!("two interfaces: {data:?}")
        };
        assert_eq!(
            (
                primary.network_card_index(),
                primary.device_index(),
                primary.interface_type()
            ),
            (Some(0), Some(0), Some("interface"))
        );
        assert_eq!(primary.groups(), ["sg-1", "sg-2"]);
        assert_eq!(primary.associate_public_ip_address(), Some(true));
        assert!(primary.connection_tracking_specification().is_some());
        if ipv6 {
            assert_eq!(primary.ipv6_prefix_count(), Some(2));
            assert_eq!(primary.primary_ipv6(), Some(true));
        } else {
            assert_eq!(primary.ipv4_prefix_count(), Some(2));
        }
        assert_eq!(
            (
                efa.network_card_index(),
                efa.device_index(),
                efa.interface_type()
            ),
            (Some(1), Some(1), Some("efa-only"))
        );
        assert_eq!(efa.groups(), ["sg-1", "sg-2"]);
        assert_eq!(efa.associate_public_ip_address(), None);
        assert_eq!(
            (efa.ipv4_prefix_count(), efa.ipv6_prefix_count()),
            (None, None)
        );
        assert_eq!((efa.primary_ipv6(), efa.ipv6_address_count()), (None, None));
        assert!(efa.connection_tracking_specification().is_none());
    }
    // The interfaces are part of the configuration: another list, another template.
    assert_ne!(
        TemplateConfig::new(&spec, launch(false)).name(),
        TemplateConfig::new(&full_spec(), launch(false)).name()
    );
}

/// Upstream: `cloudprovider/suite_test.go` (EFA) "should include vpc.amazonaws.com/efa on a nodeclaim if it
/// requests it", the launch template half: a claim requesting EFA on a class listing no interfaces gets one
/// `efa` interface per network card (device index 0 on the first card only), each with the addresses; listed
/// interfaces win over that.
#[test]
fn a_claim_requesting_efa_gets_one_efa_interface_per_card() {
    let efa_launch = || Launch {
        efa_interfaces: 2,
        ..launch(false)
    };
    let data = TemplateConfig::new(&full_spec(), efa_launch()).data();
    let [first, second] = data.network_interfaces() else {
        panic!("two interfaces: {data:?}")
    };
    assert_eq!(
        (
            first.network_card_index(),
            first.device_index(),
            first.interface_type()
        ),
        (Some(0), Some(0), Some("efa"))
    );
    assert_eq!(
        (
            second.network_card_index(),
            second.device_index(),
            second.interface_type()
        ),
        (Some(1), Some(1), Some("efa"))
    );
    for interface in [first, second] {
        assert_eq!(interface.groups(), ["sg-1", "sg-2"]);
        assert_eq!(interface.ipv4_prefix_count(), Some(2));
        assert_eq!(interface.associate_public_ip_address(), Some(true));
    }
    let mut spec = full_spec();
    spec.network_interfaces = serde_json::from_value(serde_json::json!([
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
    ]))
    .expect("interfaces");
    let data = TemplateConfig::new(&spec, efa_launch()).data();
    assert_eq!(data.network_interfaces().len(), 1, "{data:?}");
    assert_eq!(
        data.network_interfaces()[0].interface_type(),
        Some("interface")
    );
}

/// Karpenter's default block devices per AMI family (its amifamily providers), when a class lists none.
#[test]
fn each_family_gets_karpenters_default_volumes() {
    let devices = |spec: serde_json::Value| {
        let spec: EC2NodeClassSpec = serde_json::from_value(spec).expect("spec");
        BlockDevice::of(&spec)
            .into_iter()
            .map(|d| (d.device_name, d.size_gib, d.volume_type, d.encrypted))
            .collect::<Vec<_>>()
    };
    let gp3 = |device: &str, size: i32| {
        (
            device.to_owned(),
            Some(size),
            Some("gp3".to_owned()),
            Some(true),
        )
    };
    assert_eq!(
        devices(serde_json::json!({"amiSelectorTerms": [{"alias": "al2023@latest"}]})),
        [gp3("/dev/xvda", 20)]
    );
    assert_eq!(
        devices(serde_json::json!({"amiSelectorTerms": [{"alias": "bottlerocket@latest"}]})),
        [gp3("/dev/xvda", 4), gp3("/dev/xvdb", 20)]
    );
    assert_eq!(
        devices(serde_json::json!({"amiFamily": "AL2", "amiSelectorTerms": [{"id": "ami-1"}]})),
        [gp3("/dev/xvda", 20)]
    );
    assert_eq!(
        devices(serde_json::json!({"amiFamily": "Custom", "amiSelectorTerms": [{"id": "ami-1"}]})),
        []
    );
    // Listed devices replace the defaults.
    let listed = devices(serde_json::json!({
        "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
        "blockDeviceMappings": [{"deviceName": "/dev/xvdb", "ebs": {"volumeSize": "100Gi"}}],
    }));
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].1, Some(100));
}

#[test]
fn without_those_fields_the_interface_is_bare_and_monitoring_off() {
    let data = config().data();
    let ebs = data.block_device_mappings()[0].ebs().unwrap();
    assert_eq!(
        (
            ebs.iops(),
            ebs.throughput(),
            ebs.kms_key_id(),
            ebs.snapshot_id(),
            ebs.volume_initialization_rate()
        ),
        (None, None, None, None, None)
    );
    assert!(data.security_group_ids().is_empty());
    let [interface] = data.network_interfaces() else {
        panic!("one interface: {data:?}")
    };
    assert_eq!(interface.device_index(), Some(0));
    assert_eq!(interface.groups(), ["sg-1", "sg-2"]);
    assert_eq!(interface.associate_public_ip_address(), None);
    assert_eq!(interface.ipv4_prefix_count(), None);
    assert!(interface.connection_tracking_specification().is_none());
    assert_eq!(data.monitoring().and_then(|m| m.enabled()), Some(false));
    assert!(data.cpu_options().is_none());
    assert_eq!(
        data.metadata_options()
            .and_then(|m| m.instance_metadata_tags()),
        Some(&ec2::LaunchTemplateInstanceMetadataTagsState::Disabled)
    );

    // A public address refused, nested virtualization disabled, IOPS of 0 and connection tracking without a
    // timeout are sent as Karpenter sends them.
    let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
        "associatePublicIPAddress": false,
        "cpuOptions": {"nestedVirtualization": "disabled"},
        "connectionTracking": {},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"iops": 0, "throughput": 0}}],
    }))
    .unwrap();
    let data = TemplateConfig::new(&spec, launch(false)).data();
    let interface = &data.network_interfaces()[0];
    assert_eq!(interface.associate_public_ip_address(), Some(false));
    assert!(interface.connection_tracking_specification().is_none());
    assert_eq!(
        data.cpu_options().and_then(|c| c.nested_virtualization()),
        Some(&ec2::NestedVirtualizationSpecification::Disabled)
    );
    let ebs = data.block_device_mappings()[0].ebs().unwrap();
    assert_eq!((ebs.iops(), ebs.throughput()), (None, None));
}

#[test]
fn on_an_ipv6_cluster_the_prefixes_are_ipv6_and_the_interface_has_a_primary_ipv6_address() {
    assert!(ipv6_cluster(Some("fd00:10:96::/108")));
    assert!(!ipv6_cluster(Some("10.100.0.0/16")));
    assert!(!ipv6_cluster(None));
    let data = TemplateConfig::new(&full_spec(), launch(true)).data();
    let interface = &data.network_interfaces()[0];
    assert_eq!(interface.ipv6_prefix_count(), Some(2));
    assert_eq!(interface.ipv4_prefix_count(), None);
    assert_eq!(interface.primary_ipv6(), Some(true));
    assert_eq!(interface.ipv6_address_count(), Some(1));
}

#[test]
fn every_field_is_part_of_the_name_and_an_unchanged_class_keeps_its_template() {
    let base = TemplateConfig::new(&full_spec(), launch(false));
    assert_eq!(
        base.name(),
        TemplateConfig::new(&full_spec(), launch(false)).name()
    );
    assert_ne!(base.name(), config().name());
    let changes: Vec<fn(&mut EC2NodeClassSpec)> = vec![
        |s| {
            s.block_device_mappings.as_mut().unwrap()[0]
                .ebs
                .as_mut()
                .unwrap()
                .iops = Some(5000)
        },
        |s| {
            s.block_device_mappings.as_mut().unwrap()[0]
                .ebs
                .as_mut()
                .unwrap()
                .throughput = Some(300)
        },
        |s| {
            s.block_device_mappings.as_mut().unwrap()[0]
                .ebs
                .as_mut()
                .unwrap()
                .kms_key_id = None
        },
        |s| {
            s.block_device_mappings.as_mut().unwrap()[0]
                .ebs
                .as_mut()
                .unwrap()
                .snapshot_id = None
        },
        |s| {
            s.block_device_mappings.as_mut().unwrap()[0]
                .ebs
                .as_mut()
                .unwrap()
                .volume_initialization_rate = Some(300)
        },
        |s| s.associate_public_ip_address = Some(false),
        |s| s.ip_prefix_count = Some(3),
        |s| s.detailed_monitoring = None,
        |s| s.cpu_options = None,
        |s| s.connection_tracking.as_mut().unwrap().udp_timeout = Some(60),
    ];
    let mut names = std::collections::HashSet::from([base.name()]);
    for change in changes {
        let mut spec = full_spec();
        change(&mut spec);
        let name = TemplateConfig::new(&spec, launch(false)).name();
        assert!(names.insert(name), "{spec:?} shares a name");
    }
    assert!(names.insert(TemplateConfig::new(&full_spec(), launch(true)).name()));
}

#[test]
fn names_are_stable_and_differ_with_the_configuration() {
    let name = config().name();
    assert!(name.starts_with("karpenter.k8s.aws/"));
    assert_eq!(name.len(), "karpenter.k8s.aws/".len() + 16);
    assert_eq!(name, config().name());
    let other = TemplateConfig {
        image_id: "ami-2".into(),
        ..config()
    };
    assert_ne!(name, other.name());
}

#[test]
fn defaults_are_imds_v2_with_hop_limit_one_and_a_20_gib_gp3_root() {
    let c = config();
    assert_eq!(
        c.metadata,
        Metadata {
            http_endpoint: true,
            http_protocol_ipv6: false,
            hop_limit: 1,
            tokens_required: true
        }
    );
    assert_eq!(c.block_devices[0].size_gib, Some(20));
    assert_eq!(c.block_devices[0].volume_type.as_deref(), Some("gp3"));
}

/// Upstream launchtemplate suite ("should set the placement group ID in the launch template", "... and the
/// partition number"): the group goes into the template's placement, the partition only when the launch
/// names one, and each placement has a template of its own.
#[test]
fn a_placement_group_and_partition_reach_the_templates_placement() {
    let placed = |placement: Option<InstancePlacement>| {
        TemplateConfig::new(
            &EC2NodeClassSpec::default(),
            Launch {
                placement,
                ..launch(false)
            },
        )
    };
    assert!(placed(None).data().placement().is_none());
    let group = |partition| {
        placed(Some(InstancePlacement {
            group_id: "pg-1".into(),
            partition,
        }))
    };
    let data = group(None).data();
    let placement = data.placement().expect("placement");
    assert_eq!(placement.group_id(), Some("pg-1"));
    assert_eq!(placement.partition_number(), None);
    let data = group(Some(2)).data();
    assert_eq!(data.placement().and_then(|p| p.partition_number()), Some(2));
    let names: std::collections::HashSet<String> = [
        placed(None).name(),
        group(None).name(),
        group(Some(2)).name(),
    ]
    .into_iter()
    .collect();
    assert_eq!(names.len(), 3);
}

#[test]
fn a_reserved_launch_targets_its_reservation_in_its_market_and_others_stay_out_of_reservations() {
    let with = |targeting: Targeting| {
        TemplateConfig::new(
            &EC2NodeClassSpec::default(),
            Launch {
                targeting,
                ..launch(false)
            },
        )
    };
    let open = with(Targeting::Open).data();
    assert!(open.capacity_reservation_specification().is_none());
    assert!(open.instance_market_options().is_none());

    let none = with(Targeting::NoReservation).data();
    let spec = none.capacity_reservation_specification().unwrap();
    assert_eq!(
        spec.capacity_reservation_preference(),
        Some(&ec2::CapacityReservationPreference::None)
    );
    assert!(spec.capacity_reservation_target().is_none());

    let only = |market| {
        with(Targeting::Only {
            id: "cr-1".into(),
            market,
        })
    };
    let odcr = only(ReservedMarket::Default).data();
    let spec = odcr.capacity_reservation_specification().unwrap();
    assert_eq!(
        spec.capacity_reservation_preference(),
        Some(&ec2::CapacityReservationPreference::CapacityReservationsOnly)
    );
    assert_eq!(
        spec.capacity_reservation_target()
            .and_then(|t| t.capacity_reservation_id()),
        Some("cr-1")
    );
    assert!(odcr.instance_market_options().is_none());
    let market = |m| {
        only(m)
            .data()
            .instance_market_options()
            .and_then(|o| o.market_type().cloned())
    };
    assert_eq!(
        market(ReservedMarket::CapacityBlock),
        Some(ec2::MarketType::CapacityBlock)
    );
    assert_eq!(
        market(ReservedMarket::Interruptible),
        Some(ec2::MarketType::InterruptibleCapacityReservation)
    );

    // Each reservation has a template of its own, and targeting is part of every name.
    let names: std::collections::HashSet<String> = [
        with(Targeting::Open).name(),
        with(Targeting::NoReservation).name(),
        only(ReservedMarket::Default).name(),
        with(Targeting::Only {
            id: "cr-2".into(),
            market: ReservedMarket::Default,
        })
        .name(),
    ]
    .into();
    assert_eq!(names.len(), 4);
}

#[test]
fn volume_sizes_convert_to_gib() {
    assert_eq!(size_gib("20Gi"), Some(20));
    assert_eq!(size_gib("100G"), Some(94));
    assert_eq!(size_gib("1Ti"), Some(1024));
    assert_eq!(size_gib("1T"), Some(932));
    assert_eq!(size_gib("20"), None);
    assert_eq!(size_gib("Gi"), None);
}
