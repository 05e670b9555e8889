//! The instance-type catalog: the allocatable arithmetic of controller-behaviour.md §1.6 worked by hand for a
//! few types, the labels Karpenter sets, the embedded snapshot as a whole, and the file formats.

use std::collections::BTreeMap;

use kerf::api::ec2nodeclass::{AmiFamily, InstanceStorePolicy};
use kerf::api::labels;
use kerf::api::operator::Operator;
use kerf::api::requirements::{AllowUndefined, Requirement, Requirements};
use kerf::catalog::{
    self, parse_quantity, CapacityType, Catalog, CatalogError, CatalogSettings, EvictionThreshold,
    InstanceType, NetworkInterfaceCounts, Pricing, Resources,
};

const MIB: i64 = 1 << 20;
const GIB: i64 = 1 << 30;

/// The shared on-demand price list (tests may read it; nothing from it is copied into the repository).
const SHARED_PRICES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/ec2-on-demand-prices.json"
);

const EXAMPLE_FILE: &str = r#"{"instanceTypes":[{"name":"fake-it-0","cpu":"1","memory":"2Gi","pods":10,"arch":"amd64","os":["linux"],"labels":{},"overhead":{"cpu":"100m","memory":"10Mi"},"offerings":[{"zone":"test-zone-1","capacityType":"spot","price":0.3,"available":true}]}]}"#;

fn us_east_1(settings: &CatalogSettings) -> Catalog {
    Catalog::embedded("us-east-1", settings, &Pricing::none()).expect("us-east-1 is embedded")
}

fn instance_type(settings: &CatalogSettings, name: &str) -> InstanceType {
    us_east_1(settings)
        .get(name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} is in the us-east-1 snapshot"))
}

/// The single value of a label, or `None` when the type has no value (`DoesNotExist`).
fn label(it: &InstanceType, key: &str) -> Option<String> {
    let requirement = it
        .requirements
        .get(key)
        .unwrap_or_else(|| panic!("{} defines {key}", it.name));
    let values = requirement.values().expect("a finite set of values");
    assert!(values.len() <= 1, "{key} has one value at most: {values:?}");
    values.first().cloned()
}

#[test]
fn quantity_table() {
    let cases: &[(&str, i64)] = &[
        ("100m", 100),
        ("1", 1_000),
        ("0.1", 100),
        ("1.5Gi", 1_610_612_736_000),
        ("2e3", 2_000_000),
        ("1Ki", 1_024_000),
        ("1k", 1_000_000),
        ("500Mi", 524_288_000_000),
        ("1.5", 1_500),
        ("0.0001", 1),     // 0.1 milli rounds up
        ("1.0001", 1_001), // 1000.1 milli rounds up
        ("10n", 1),
        ("-1.5m", -2), // away from zero, as Kubernetes
        ("+2", 2_000),
        ("3E-3", 3),
    ];
    for (text, milli) in cases {
        assert_eq!(parse_quantity(text), Ok(*milli), "{text}");
    }
    for bad in ["", "1Kb", "Gi", "1.2.3", "1e", "e3"] {
        assert!(parse_quantity(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn m5_large_allocatable_matches_the_formulas() {
    let m5 = instance_type(&CatalogSettings::default(), "m5.large");
    // cpu: 2 vCPUs = 2000m; kube-reserved 6 % of the first core (60m) + 1 % of the second (10m) = 70m.
    assert_eq!(m5.capacity.cpu, 2_000);
    // pods: 3 ENIs × (10 IPv4 per ENI − 1) + 2 = 29.
    assert_eq!(m5.capacity.pods, 29);
    // memory: 8192 MiB − ceil(8192 × 0.075 = 614.4) = 8192 − 615 = 7577 MiB.
    assert_eq!(m5.capacity.memory, 7_577 * MIB);
    // ephemeral storage: AL2023's 20Gi root volume.
    assert_eq!(m5.capacity.ephemeral_storage, 20 * GIB);
    // overhead: kube-reserved 70m, 11 × 29 + 255 = 574 MiB, 1Gi; eviction 100Mi and 10 % of 20Gi = 2Gi.
    assert_eq!(m5.overhead.cpu, 70);
    assert_eq!(m5.overhead.memory, (574 + 100) * MIB);
    assert_eq!(m5.overhead.ephemeral_storage, GIB + 2 * GIB);
    let allocatable = m5.allocatable();
    assert_eq!(allocatable.cpu, 1_930);
    // 7577 − 574 − 100 = 6903 MiB
    assert_eq!(allocatable.memory, 6_903 * MIB);
    assert_eq!(allocatable.pods, 29);
    assert_eq!(allocatable.ephemeral_storage, 17 * GIB);
    assert!(allocatable.extended.is_empty());
}

#[test]
fn arm64_loses_64_mib_before_the_vm_overhead() {
    let m7g = instance_type(&CatalogSettings::default(), "m7g.large");
    assert_eq!(label(&m7g, labels::ARCH).as_deref(), Some("arm64"));
    // 8192 − 64 = 8128 MiB; − ceil(8128 × 0.075 = 609.6) = 8128 − 610 = 7518 MiB.
    assert_eq!(m7g.capacity.memory, 7_518 * MIB);
    // Same ENIs as m5.large: 29 pods, 574 MiB kube-reserved, 100 MiB eviction → 6844 MiB.
    assert_eq!(m7g.allocatable().memory, 6_844 * MIB);
    assert_eq!(
        label(&m7g, catalog::INSTANCE_CPU_MANUFACTURER).as_deref(),
        Some("aws")
    );
}

#[test]
fn gpu_types_get_gpu_resources_and_labels() {
    let settings = CatalogSettings::default();
    let g4dn = instance_type(&settings, "g4dn.xlarge");
    assert_eq!(g4dn.capacity.get(catalog::NVIDIA_GPU), 1);
    assert_eq!(g4dn.allocatable().get(catalog::NVIDIA_GPU), 1);
    assert_eq!(
        label(&g4dn, catalog::INSTANCE_GPU_NAME).as_deref(),
        Some("t4")
    );
    assert_eq!(
        label(&g4dn, catalog::INSTANCE_GPU_MANUFACTURER).as_deref(),
        Some("nvidia")
    );
    assert_eq!(
        label(&g4dn, catalog::INSTANCE_GPU_COUNT).as_deref(),
        Some("1")
    );
    assert_eq!(
        label(&g4dn, catalog::INSTANCE_GPU_MEMORY).as_deref(),
        Some("16384")
    );
    assert_eq!(
        label(&g4dn, catalog::INSTANCE_LOCAL_NVME).as_deref(),
        Some("125")
    );

    let p5 = instance_type(&settings, "p5.48xlarge");
    assert_eq!(p5.capacity.get(catalog::NVIDIA_GPU), 8);
    assert_eq!(p5.capacity.get(catalog::EFA), 32);
    assert_eq!(
        label(&p5, catalog::INSTANCE_GPU_NAME).as_deref(),
        Some("h100")
    );
    // Only the default network card's 2 ENIs count: 2 × 49 + 2.
    assert_eq!(p5.capacity.pods, 100);

    let inf2 = instance_type(&settings, "inf2.xlarge");
    assert_eq!(inf2.capacity.get(catalog::AWS_NEURON), 1);
    assert_eq!(inf2.capacity.get(catalog::AWS_NEURON_CORE), 2);
    assert_eq!(
        label(&inf2, catalog::INSTANCE_ACCELERATOR_NAME).as_deref(),
        Some("inferentia2")
    );
    assert_eq!(
        label(&inf2, catalog::INSTANCE_ACCELERATOR_MANUFACTURER).as_deref(),
        Some("aws")
    );
    assert_eq!(label(&inf2, catalog::INSTANCE_GPU_NAME), None);

    let trn1 = instance_type(&settings, "trn1.32xlarge");
    assert_eq!(trn1.capacity.get(catalog::AWS_NEURON), 16);
    assert_eq!(trn1.capacity.get(catalog::AWS_NEURON_CORE), 32);
    assert_eq!(trn1.capacity.get(catalog::EFA), 8);
    assert_eq!(
        label(&trn1, catalog::INSTANCE_ACCELERATOR_NAME).as_deref(),
        Some("trainium")
    );
    assert_eq!(
        label(&trn1, catalog::INSTANCE_ACCELERATOR_COUNT).as_deref(),
        Some("16")
    );

    // A type without GPUs says so, so a pod that needs a GPU never intersects it.
    let m5 = instance_type(&settings, "m5.large");
    assert_eq!(label(&m5, catalog::INSTANCE_GPU_COUNT), None);
    let wants_gpu: Requirements =
        [
            Requirement::new(catalog::INSTANCE_GPU_COUNT, Operator::Gt, ["0"], None)
                .expect("Gt with one integer"),
        ]
        .into_iter()
        .collect();
    assert!(!m5
        .requirements
        .is_compatible(&wants_gpu, AllowUndefined::well_known_labels()));
    assert!(g4dn
        .requirements
        .is_compatible(&wants_gpu, AllowUndefined::well_known_labels()));
}

#[test]
fn metal_types_have_no_hypervisor() {
    let metal = instance_type(&CatalogSettings::default(), "m5.metal");
    assert_eq!(
        label(&metal, catalog::INSTANCE_SIZE).as_deref(),
        Some("metal")
    );
    assert_eq!(label(&metal, catalog::INSTANCE_HYPERVISOR), None);
    // 96 vCPUs: kube-reserved 60 + 10 + 2 × 5 + 0.25 % × 92000 = 310m.
    assert_eq!(metal.allocatable().cpu, 96_000 - 310);
    // 15 ENIs × 49 + 2 = 737 pods; memory 393216 − ceil(29491.2) = 363724 MiB, − (11 × 737 + 255) − 100.
    assert_eq!(metal.capacity.pods, 737);
    assert_eq!(metal.allocatable().memory, (363_724 - 8_362 - 100) * MIB);
    let c7gn = instance_type(&CatalogSettings::default(), "c7gn.metal");
    assert_eq!(
        label(&c7gn, catalog::INSTANCE_FAMILY).as_deref(),
        Some("c7gn")
    );
    assert_eq!(label(&c7gn, catalog::INSTANCE_HYPERVISOR), None);
}

#[test]
fn max_pods_and_pods_per_core_override_the_eni_limit() {
    let mut settings = CatalogSettings::default();
    settings.kubelet.max_pods = Some(110);
    let m5 = instance_type(&settings, "m5.large");
    assert_eq!(m5.capacity.pods, 110);
    // AL2023 sizes kube-reserved memory by the ENI limit whatever maxPods says: still 574 MiB.
    assert_eq!(m5.overhead.memory, (574 + 100) * MIB);

    settings.kubelet.pods_per_core = Some(4);
    // min(110, 4 × 2 vCPUs) = 8
    assert_eq!(instance_type(&settings, "m5.large").capacity.pods, 8);

    // Bottlerocket ignores podsPerCore and sizes kube-reserved memory by the pods: 11 × 110 + 255 = 1465.
    settings.ami_family = AmiFamily::Bottlerocket;
    let bottlerocket = instance_type(&settings, "m5.large");
    assert_eq!(bottlerocket.capacity.pods, 110);
    assert_eq!(bottlerocket.overhead.memory, (1_465 + 100) * MIB);

    // RESERVED_ENIS takes interfaces away from pods, but not from the kube-reserved estimate.
    let reserved = CatalogSettings {
        reserved_enis: 1,
        ..CatalogSettings::default()
    };
    let m5 = instance_type(&reserved, "m5.large");
    assert_eq!(m5.capacity.pods, 2 * 9 + 2);
    assert_eq!(m5.overhead.memory, (574 + 100) * MIB);
}

#[test]
fn efa_only_interfaces_take_enis_from_pods() {
    let settings = CatalogSettings {
        network_interfaces: Some(NetworkInterfaceCounts {
            efa_only: 3,
            efa_only_on_card_0: 1,
        }),
        ..CatalogSettings::default()
    };
    let p5 = instance_type(&settings, "p5.48xlarge");
    // (2 − 1) ENIs × 49 + 2 = 51; the EFA capacity is what the EC2NodeClass attaches.
    assert_eq!(p5.capacity.pods, 51);
    assert_eq!(p5.capacity.get(catalog::EFA), 3);
    // kube-reserved memory: 11 × 51 + 255 = 816 MiB.
    assert_eq!(p5.overhead.memory, (816 + 100) * MIB);
}

#[test]
fn storage_comes_from_the_root_volume_or_the_instance_store() {
    let sized = CatalogSettings {
        root_volume_bytes: Some(100 * GIB),
        ..CatalogSettings::default()
    };
    let m5 = instance_type(&sized, "m5.large");
    assert_eq!(m5.capacity.ephemeral_storage, 100 * GIB);
    // 100Gi − 1Gi kube-reserved − 10Gi eviction
    assert_eq!(m5.allocatable().ephemeral_storage, 89 * GIB);

    let raid0 = CatalogSettings {
        instance_store_policy: Some(InstanceStorePolicy::Raid0),
        ..CatalogSettings::default()
    };
    assert_eq!(
        instance_type(&raid0, "m5d.2xlarge")
            .capacity
            .ephemeral_storage,
        300_000_000_000
    );
    // Without an instance store, RAID0 changes nothing.
    assert_eq!(
        instance_type(&raid0, "m5.large").capacity.ephemeral_storage,
        20 * GIB
    );
}

#[test]
fn eviction_hard_and_reservations_override_per_key() {
    let mut settings = CatalogSettings::default();
    settings.kubelet.eviction_memory_available = Some(EvictionThreshold::Percent(5.0));
    settings.kubelet.eviction_nodefs_available = Some(EvictionThreshold::Amount(GIB));
    settings.kubelet.kube_reserved = BTreeMap::from([("cpu".to_owned(), 500)]);
    settings.kubelet.system_reserved =
        BTreeMap::from([("memory".to_owned(), 200 * MIB), ("pid".to_owned(), 1_000)]);
    let m5 = instance_type(&settings, "m5.large");
    assert_eq!(m5.overhead.cpu, 500);
    // 574 MiB kube-reserved + 200 MiB system-reserved + ceil(5 % of 7577 MiB) bytes.
    let five_percent = (7_577 * MIB * 5 + 99) / 100; // rounded up
    assert_eq!(m5.overhead.memory, 774 * MIB + five_percent);
    assert_eq!(m5.overhead.ephemeral_storage, 2 * GIB);
    // A reservation of a resource the node does not have takes nothing away.
    assert!(m5.allocatable().extended.is_empty());
}

#[test]
fn windows_nodes_get_110_pods_and_windows_labels() {
    let settings = CatalogSettings {
        ami_family: AmiFamily::Windows2022,
        ..CatalogSettings::default()
    };
    let types = us_east_1(&settings);
    let m5 = types.get("m5.large").expect("m5.large");
    assert_eq!(m5.capacity.pods, 110);
    assert_eq!(m5.capacity.ephemeral_storage, 50 * GIB);
    assert_eq!(m5.capacity.get(catalog::PRIVATE_IPV4_ADDRESS), 9);
    assert_eq!(label(m5, labels::OS).as_deref(), Some("windows"));
    assert_eq!(
        label(m5, labels::WINDOWS_BUILD).as_deref(),
        Some("10.0.20348")
    );
    // No Windows AMI runs on arm64.
    assert_eq!(
        label(types.get("m7g.large").expect("m7g.large"), labels::OS),
        None
    );
}

#[test]
fn labels_follow_the_name_and_the_facts() {
    let types = us_east_1(&CatalogSettings::default());
    let m5d = types.get("m5d.2xlarge").expect("m5d.2xlarge");
    let expected = [
        (labels::INSTANCE_TYPE, "m5d.2xlarge"),
        (labels::ARCH, "amd64"),
        (labels::OS, "linux"),
        (labels::REGION, "us-east-1"),
        (catalog::INSTANCE_CATEGORY, "m"),
        (catalog::INSTANCE_FAMILY, "m5d"),
        (catalog::INSTANCE_GENERATION, "5"),
        (catalog::INSTANCE_SIZE, "2xlarge"),
        (catalog::INSTANCE_CPU, "8"),
        (catalog::INSTANCE_CPU_MANUFACTURER, "intel"),
        (catalog::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ, "3100"),
        (catalog::INSTANCE_MEMORY, "32768"),
        (catalog::INSTANCE_HYPERVISOR, "nitro"),
        (catalog::INSTANCE_LOCAL_NVME, "300"),
        (catalog::INSTANCE_EBS_BANDWIDTH, "4750"),
        (catalog::INSTANCE_NETWORK_BANDWIDTH, "2500"),
        (catalog::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED, "false"),
        (catalog::INSTANCE_CAPABILITY_FLEX, "false"),
    ];
    for (key, value) in expected {
        assert_eq!(label(m5d, key).as_deref(), Some(value), "{key}");
    }
    assert_eq!(label(m5d, labels::WINDOWS_BUILD), None);
    let zones = m5d
        .requirements
        .get(labels::ZONE)
        .and_then(Requirement::values);
    assert_eq!(
        zones.map(|z| z.iter().map(String::as_str).collect::<Vec<_>>()),
        Some(vec![
            "us-east-1a",
            "us-east-1b",
            "us-east-1c",
            "us-east-1d",
            "us-east-1f"
        ])
    );
    let capacity_types = m5d
        .requirements
        .get(labels::CAPACITY_TYPE)
        .and_then(Requirement::values)
        .expect("capacity types");
    assert!(capacity_types.contains("spot") && capacity_types.contains("on-demand"));
    assert_eq!(m5d.offerings.len(), 5 * 2);

    let flex = types.get("c7i-flex.large").expect("c7i-flex.large");
    assert_eq!(
        label(flex, catalog::INSTANCE_CAPABILITY_FLEX).as_deref(),
        Some("true")
    );
    assert_eq!(
        label(flex, catalog::INSTANCE_CATEGORY).as_deref(),
        Some("c")
    );
    assert_eq!(
        label(flex, catalog::INSTANCE_GENERATION).as_deref(),
        Some("7")
    );
    let burstable = types.get("t3.micro").expect("t3.micro");
    assert_eq!(
        label(burstable, catalog::INSTANCE_NETWORK_BANDWIDTH).as_deref(),
        Some("64")
    );
}

#[test]
fn every_embedded_type_is_usable() {
    for region in catalog::embedded_regions() {
        let types = Catalog::embedded(region, &CatalogSettings::default(), &Pricing::none())
            .expect("embedded snapshot parses");
        assert!(types.instance_types.len() > 1_000, "{region}");
        for it in &types.instance_types {
            assert!(!it.offerings.is_empty(), "{} has offerings", it.name);
            assert!(it
                .offerings
                .iter()
                .all(|o| o.available && o.price.is_none()));
            assert!(!it.requirements.is_empty(), "{}", it.name);
            assert_eq!(
                label(it, labels::INSTANCE_TYPE).as_deref(),
                Some(it.name.as_str())
            );
            let allocatable = it.allocatable();
            assert!(
                allocatable.cpu > 0
                    && allocatable.memory > 0
                    && allocatable.pods > 0
                    && allocatable.ephemeral_storage > 0
                    && allocatable.extended.values().all(|v| *v > 0),
                "{}: {allocatable:?}",
                it.name
            );
        }
    }
}

#[test]
fn unknown_regions_name_the_embedded_ones() {
    let error = Catalog::embedded("eu-west-9", &CatalogSettings::default(), &Pricing::none())
        .expect_err("not embedded");
    assert!(matches!(error, CatalogError::UnknownRegion { .. }));
    let message = error.to_string();
    assert!(
        message.contains("eu-west-9")
            && message.contains("us-east-1")
            && message.contains("--instance-types"),
        "{message}"
    );
}

#[test]
fn shared_price_list_prices_on_demand_offerings() {
    let Ok(text) = std::fs::read_to_string(SHARED_PRICES) else {
        eprintln!("skipped: {SHARED_PRICES} is not on this machine");
        return;
    };
    let pricing = Pricing::from_json(&text).expect("the shared price list parses");
    assert_eq!(pricing.on_demand("us-east-1", "m5.large"), Some(0.096));
    assert!(pricing.source().is_some());
    let types =
        Catalog::embedded("us-east-1", &CatalogSettings::default(), &pricing).expect("us-east-1");
    let m5 = types.get("m5.large").expect("m5.large");
    for offering in &m5.offerings {
        match offering.capacity_type {
            CapacityType::OnDemand => assert_eq!(offering.price, Some(0.096)),
            // The list has no spot prices, and kerf does not invent one.
            _ => assert_eq!(offering.price, None),
        }
    }
    assert_eq!(pricing.on_demand("us-east-1", "no-such.type"), None);
    assert_eq!(pricing.on_demand("eu-west-9", "m5.large"), None);
}

#[test]
fn instance_types_file_round_trips() {
    let types =
        Catalog::from_instance_types_json(EXAMPLE_FILE).expect("the documented example parses");
    let it = &types.instance_types[0];
    assert_eq!(it.name, "fake-it-0");
    assert_eq!(
        it.capacity,
        Resources {
            cpu: 1_000,
            memory: 2 * GIB,
            pods: 10,
            ..Resources::default()
        }
    );
    // allocatable = capacity − overhead
    let allocatable = it.allocatable();
    assert_eq!(allocatable.cpu, 900);
    assert_eq!(allocatable.memory, 2 * GIB - 10 * MIB);
    assert_eq!(label(it, labels::ZONE).as_deref(), Some("test-zone-1"));
    assert_eq!(label(it, labels::CAPACITY_TYPE).as_deref(), Some("spot"));
    assert_eq!(label(it, labels::ARCH).as_deref(), Some("amd64"));
    assert_eq!(it.offerings[0].price, Some(0.3));

    let written = types.to_instance_types_json().expect("serializes");
    let as_value = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("JSON");
    assert_eq!(as_value(&written), as_value(EXAMPLE_FILE));
    assert_eq!(Catalog::from_instance_types_json(&written), Ok(types));
}

#[test]
fn instance_types_file_carries_labels_and_extra_resources() {
    let text = r#"{"instanceTypes":[{"name":"gpu-1","cpu":4,"memory":"16Gi","pods":50,
        "labels":{"karpenter.k8s.aws/instance-gpu-count":"1","team":"ml"},
        "resources":{"nvidia.com/gpu":"1","ephemeral-storage":"100Gi"},
        "offerings":[{"zone":"z1","capacityType":"on-demand"},{"zone":"z2","capacityType":"spot","available":false}]}]}"#;
    let types = Catalog::from_instance_types_json(text).expect("parses");
    let it = &types.instance_types[0];
    assert_eq!(it.capacity.cpu, 4_000);
    assert_eq!(it.capacity.get(catalog::NVIDIA_GPU), 1);
    assert_eq!(it.capacity.ephemeral_storage, 100 * GIB);
    assert_eq!(label(it, "team").as_deref(), Some("ml"));
    assert_eq!(label(it, labels::OS).as_deref(), Some("linux"));
    assert_eq!(it.offerings[0].price, None);
    assert!(!it.offerings[1].available);
    let written = types.to_instance_types_json().expect("serializes");
    assert_eq!(Catalog::from_instance_types_json(&written), Ok(types));
}

/// A label one type of the file carries is one the others do not have: a pod requiring it cannot land on them
/// (Karpenter's fake types say `special DoesNotExist` unless large; the AWS types say so of their GPU labels).
#[test]
fn a_label_some_file_types_carry_does_not_exist_on_the_others() {
    let text = r#"{"instanceTypes":[
        {"name":"small","cpu":2,"memory":"2Gi","pods":5,"labels":{"size":"small"},
         "offerings":[{"zone":"z1","capacityType":"on-demand"}]},
        {"name":"large","cpu":16,"memory":"64Gi","pods":5,"labels":{"size":"large","special":"optional"},
         "offerings":[{"zone":"z1","capacityType":"on-demand"}]}]}"#;
    let types = Catalog::from_instance_types_json(text).expect("parses");
    let wants_special: Requirements = [Requirement::one_of("special", ["optional"])]
        .into_iter()
        .collect();
    let fits: Vec<&str> = types
        .instance_types
        .iter()
        .filter(|it| it.requirements.has_intersection(&wants_special))
        .map(|it| it.name.as_str())
        .collect();
    assert_eq!(fits, ["large"]);
    let keys = types.label_keys();
    assert!(
        keys.contains("special") && keys.contains("size"),
        "{keys:?}"
    );
}

#[test]
fn instance_types_file_errors_say_what_to_fix() {
    let cases = [
        (
            r#"{"instanceTypes":[{"name":"a","cpu":"1","memory":"2GB","pods":1,"offerings":[{"zone":"z","capacityType":"spot"}]}]}"#,
            "invalid quantity \"2GB\" for memory",
        ),
        (
            r#"{"instanceTypes":[{"name":"a","cpu":"1","memory":"2Gi","pods":-1,"offerings":[]}]}"#,
            "instanceTypes[0].pods",
        ),
        (
            r#"{"instanceTypes":[{"name":"a","cpu":"1","memory":"2Gi","pods":1,"offerings":[{"zone":"z","capacityType":"cheap"}]}]}"#,
            "instanceTypes[0].offerings[0].capacityType",
        ),
        (
            r#"{"instanceTypes":[{"name":"a","cpu":"1","memory":"2Gi","pods":1,"offerings":[]}]}"#,
            "has no offerings",
        ),
        (
            r#"{"instanceTypes":[{"name":"a","cpu":"1","memory":"2Gi","pods":1,"labels":{"kubernetes.io/arch":"arm64"},"offerings":[{"zone":"z","capacityType":"spot"}]}]}"#,
            "comes from arch",
        ),
        (
            r#"{"instanceTypes":[{"name":"a","cpu":"1","memory":"2Gi","pods":1,"offerings":[{"zone":"z","capacityType":"spot","price":-1}]}]}"#,
            "offerings[0].price",
        ),
        (
            r#"{"instanceTypes":[{"name":"a","cpu":"1","memory":"2Gi","pods":1,"gpus":1,"offerings":[{"zone":"z","capacityType":"spot"}]}]}"#,
            "unknown field `gpus`",
        ),
    ];
    for (text, expected) in cases {
        let message = Catalog::from_instance_types_json(text)
            .expect_err(expected)
            .to_string();
        assert!(
            message.contains(expected),
            "{expected:?} not in {message:?}"
        );
    }
    let twice = format!(
        r#"{{"instanceTypes":[{0},{0}]}}"#,
        r#"{"name":"a","cpu":"1","memory":"2Gi","pods":1,"offerings":[{"zone":"z","capacityType":"spot"}]}"#
    );
    let message = Catalog::from_instance_types_json(&twice)
        .expect_err("duplicate")
        .to_string();
    assert!(message.contains("described twice"), "{message}");
}

#[test]
fn embedded_types_export_to_the_file_format() {
    let types = us_east_1(&CatalogSettings::default());
    let subset = Catalog {
        instance_types: vec![types.get("g4dn.xlarge").expect("g4dn.xlarge").clone()],
    };
    let reread =
        Catalog::from_instance_types_json(&subset.to_instance_types_json().expect("serializes"))
            .expect("the export reads back");
    let (original, copy) = (&subset.instance_types[0], &reread.instance_types[0]);
    assert_eq!(copy.capacity, original.capacity);
    assert_eq!(copy.allocatable(), original.allocatable());
    assert_eq!(
        label(copy, catalog::INSTANCE_GPU_NAME).as_deref(),
        Some("t4")
    );
    assert_eq!(copy.offerings, original.offerings);
}
