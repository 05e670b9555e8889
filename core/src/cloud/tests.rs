//! Tests of the launch request and plan, drift, and the in-memory cloud, on a small slice of the embedded
//! us-west-2 catalog.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::sim::{CapacityFault, Operation, SimAmi, SimCloud, SimSecurityGroup, SimSubnet};
use super::*;
use crate::api::ec2nodeclass::{SecurityGroup, Subnet};
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::{CapacityType, Catalog, CatalogSettings, Pricing};

const CLUSTER: &str = "test-cluster";
const PRICES: &str = r#"{
  "onDemandUsdPerHour": {"us-west-2": {"m5.large": 0.096, "c5.large": 0.085, "m6g.large": 0.077,
                                       "m5.xlarge": 0.192}},
  "spotUsdPerHour": {"us-west-2": {"m5.large": 0.04, "c5.large": 0.035, "m6g.large": 0.03,
                                   "m5.xlarge": 0.5}}
}"#;

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn catalog() -> Vec<InstanceType> {
    let pricing = Pricing::from_json(PRICES).unwrap();
    let catalog = Catalog::embedded("us-west-2", &CatalogSettings::default(), &pricing).unwrap();
    catalog
        .instance_types
        .into_iter()
        .filter(|it| ["m5.large", "c5.large", "m6g.large", "m5.xlarge"].contains(&it.name.as_str()))
        .collect()
}

fn tags(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sim() -> SimCloud {
    let cloud = SimCloud::new(CLUSTER, catalog());
    for (id, zone, ips) in [
        ("subnet-a", "us-west-2a", 4000),
        ("subnet-b", "us-west-2b", 4000),
    ] {
        cloud.add_subnet(SimSubnet {
            subnet: Subnet {
                id: id.into(),
                zone: zone.into(),
                zone_id: Some(format!("usw2-{}", &zone[9..])),
            },
            available_ips: ips,
            tags: tags(&[("karpenter.sh/discovery", CLUSTER)]),
        });
    }
    cloud.add_subnet(SimSubnet {
        subnet: Subnet {
            id: "subnet-other".into(),
            zone: "us-west-2c".into(),
            zone_id: None,
        },
        available_ips: 4000,
        tags: tags(&[("karpenter.sh/discovery", "another-cluster")]),
    });
    cloud.add_security_group(SimSecurityGroup {
        group: SecurityGroup {
            id: "sg-1".into(),
            name: Some("nodes".into()),
        },
        tags: tags(&[("karpenter.sh/discovery", CLUSTER)]),
    });
    for (id, arch, created) in [
        ("ami-old", "x86_64", "2025-01-01T00:00:00Z"),
        ("ami-new", "x86_64", "2025-06-01T00:00:00Z"),
        ("ami-arm", "arm64", "2025-06-01T00:00:00Z"),
    ] {
        cloud.add_ami(SimAmi {
            ami: ResolvedAmi {
                id: id.into(),
                name: None,
                architecture: arch.into(),
                creation_date: Some(created.into()),
                variants: Vec::new(),
                deprecated: false,
            },
            alias_family: Some("al2023".into()),
            tags: BTreeMap::new(),
        });
    }
    cloud
}

fn spec() -> crate::api::ec2nodeclass::EC2NodeClassSpec {
    serde_json::from_value(serde_json::json!({
        "role": "KarpenterNodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "tags": {"team": "a", "karpenter.sh/nodepool": "spoofed"}
    }))
    .unwrap()
}

fn claim(capacity_types: &[&str]) -> NodeClaim {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abc12", "labels": {"karpenter.sh/nodepool": "default", "team": "a"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In",
                 "values": ["m5.large", "c5.large", "m6g.large", "m5.xlarge"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}
            ],
            "taints": [{"key": "dedicated", "value": "a", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "example.com/booting", "effect": "NoExecute"}]
        }
    }))
    .unwrap()
}

/// A request that owns its instance types, so tests can change them.
async fn request(cloud: &SimCloud, capacity_types: &[&str]) -> LaunchRequest<'static> {
    let class = cloud.resolve_node_class("default", &spec()).await.unwrap();
    let types = cloud.instance_types(&class, t0()).await.unwrap();
    LaunchRequest::from_node_claim(&claim(capacity_types), class, &types)
        .unwrap()
        .into_owned()
}

#[tokio::test]
async fn a_request_keeps_the_compatible_types_cheapest_first_with_labels_and_taints() {
    let request = request(&sim(), &["on-demand"]).await;
    let names: Vec<_> = request
        .instance_types
        .iter()
        .map(|it| it.name.as_str())
        .collect();
    // m6g.large is arm64; the claim asks for amd64.
    assert_eq!(names, ["c5.large", "m5.large", "m5.xlarge"]);
    assert_eq!(request.node_claim, "default-abc12");
    assert_eq!(request.node_pool, "default");
    assert_eq!(request.labels["team"], "a");
    assert_eq!(request.labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(request.labels["kubernetes.io/arch"], "amd64");
    let taints: Vec<_> = request.taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(taints, ["dedicated", "example.com/booting"]);
}

#[tokio::test]
async fn tags_carry_the_class_tags_and_kerfs_own_which_win() {
    let request = request(&sim(), &["on-demand"]).await;
    assert_eq!(
        request.tags(CLUSTER),
        tags(&[
            ("team", "a"),
            ("karpenter.sh/nodepool", "default"),
            ("karpenter.sh/nodeclaim", "default-abc12"),
            ("karpenter.k8s.aws/ec2nodeclass", "default"),
            ("eks:eks-cluster-name", CLUSTER),
            ("kubernetes.io/cluster/test-cluster", "owned"),
        ])
    );
}

#[tokio::test]
async fn the_plan_prefers_spot_and_drops_spot_pools_pricier_than_on_demand() {
    let request = request(&sim(), &["spot", "on-demand"]).await;
    let plan = plan(&request, &IceCache::new(), t0()).unwrap();
    assert_eq!(plan.capacity_type, CapacityType::Spot);
    let pools: Vec<_> = plan
        .overrides
        .iter()
        .map(|o| {
            (
                o.instance_type.as_str(),
                o.zone.as_str(),
                o.subnet_id.as_str(),
            )
        })
        .collect();
    // m5.xlarge spot (0.5) costs more than c5.large on-demand (0.085); us-west-2c has no subnet of ours.
    assert_eq!(
        pools,
        [
            ("c5.large", "us-west-2a", "subnet-a"),
            ("c5.large", "us-west-2b", "subnet-b"),
            ("m5.large", "us-west-2a", "subnet-a"),
            ("m5.large", "us-west-2b", "subnet-b"),
        ]
    );
    assert!(plan.overrides.iter().all(|o| o.image_id == "ami-new"));
}

#[tokio::test]
async fn the_plan_skips_ice_cached_pools_and_falls_back_to_on_demand() {
    let request = request(&sim(), &["spot", "on-demand"]).await;
    let mut ice = IceCache::new();
    for name in ["c5.large", "m5.large", "m5.xlarge"] {
        for zone in ["us-west-2a", "us-west-2b"] {
            ice.mark(
                OfferingKey {
                    capacity_type: CapacityType::Spot,
                    instance_type: name.into(),
                    zone: zone.into(),
                },
                t0(),
            );
        }
    }
    let plan = plan(&request, &ice, t0() + Duration::from_secs(60)).unwrap();
    assert_eq!(plan.capacity_type, CapacityType::OnDemand);
    assert_eq!(plan.overrides[0].instance_type, "c5.large");
    // Three minutes later spot is back.
    let later = super::plan(&request, &ice, t0() + ICE_TTL).unwrap();
    assert_eq!(later.capacity_type, CapacityType::Spot);
}

/// Adds a reserved offering of reservation `id` (taking `capacity` more instances) in `zone` to `it`, priced as
/// AWS prices them.
fn reserve(it: &mut InstanceType, zone: &str, id: &str, capacity: u32) {
    let mut offering = it
        .offerings
        .iter()
        .find(|o| o.zone == zone && o.capacity_type == CapacityType::OnDemand)
        .expect("an on-demand offering")
        .clone();
    offering.capacity_type = CapacityType::Reserved;
    offering.price = offering
        .price
        .map(|p| p / crate::catalog::RESERVED_PRICE_DIVISOR);
    offering.available = capacity > 0;
    offering.reservation = Some(crate::catalog::Reservation {
        id: id.into(),
        capacity,
        reservation_type: Default::default(),
        interruptible: false,
    });
    it.offerings.push(offering);
}

/// A request whose m5.large has two reservations in us-west-2a and one in 2b, and whose c5.large has a full one.
async fn reserved_request(cloud: &SimCloud, capacity_types: &[&str]) -> LaunchRequest<'static> {
    let mut request = request(cloud, capacity_types).await;
    for it in &mut request.instance_types {
        let it = it.to_mut();
        match it.name.as_str() {
            "m5.large" => {
                reserve(it, "us-west-2a", "cr-small", 1);
                reserve(it, "us-west-2a", "cr-big", 3);
                reserve(it, "us-west-2b", "cr-b", 1);
            }
            "c5.large" => reserve(it, "us-west-2a", "cr-full", 0),
            _ => {}
        }
    }
    request
}

fn pools(plan: &LaunchPlan) -> Vec<(&str, &str, Option<&str>)> {
    plan.overrides
        .iter()
        .map(|o| {
            (
                o.instance_type.as_str(),
                o.zone.as_str(),
                o.reservation_id.as_deref(),
            )
        })
        .collect()
}

#[tokio::test]
async fn reserved_capacity_comes_first_one_reservation_per_type_and_zone_the_roomiest() {
    let request = reserved_request(&sim(), &["reserved", "spot", "on-demand"]).await;
    let plan = plan(&request, &IceCache::new(), t0()).unwrap();
    assert_eq!(plan.capacity_type, CapacityType::Reserved);
    assert_eq!(
        pools(&plan),
        [
            ("m5.large", "us-west-2a", Some("cr-big")),
            ("m5.large", "us-west-2b", Some("cr-b")),
        ]
    );
    assert_eq!(
        plan.overrides[0].key(plan.capacity_type).to_string(),
        "reserved:m5.large:us-west-2a"
    );

    // A claim planned into one reservation launches into that one only.
    let mut held = request.clone();
    held.requirements
        .add(crate::api::requirements::Requirement::one_of(
            crate::catalog::CAPACITY_RESERVATION_ID,
            ["cr-small"],
        ));
    let plan = super::plan(&held, &IceCache::new(), t0()).unwrap();
    assert_eq!(pools(&plan), [("m5.large", "us-west-2a", Some("cr-small"))]);

    // Not allowed reserved capacity, the claim launches as before.
    let spot = reserved_request(&sim(), &["spot", "on-demand"]).await;
    let plan = super::plan(&spot, &IceCache::new(), t0()).unwrap();
    assert_eq!(plan.capacity_type, CapacityType::Spot);
    assert!(plan.overrides.iter().all(|o| o.reservation_id.is_none()));
}

#[tokio::test]
async fn the_sim_launches_into_the_planned_reservation() {
    let cloud = sim();
    let request = reserved_request(&cloud, &["reserved", "on-demand"]).await;
    let instance = cloud.create(&request, t0()).await.unwrap();
    assert_eq!(instance.capacity_type, CapacityType::Reserved);
    assert_eq!(
        (instance.instance_type.as_str(), instance.zone.as_str()),
        ("m5.large", "us-west-2a")
    );
    let reservation = instance.reservation.expect("launched into a reservation");
    assert_eq!(reservation.id, "cr-big");
    assert!(!reservation.interruptible);
}

#[tokio::test]
async fn nothing_to_launch_is_insufficient_capacity() {
    let mut request = request(&sim(), &["on-demand"]).await;
    for it in &mut request.instance_types {
        for offering in &mut it.to_mut().offerings {
            offering.available = false;
        }
    }
    assert_eq!(
        plan(&request, &IceCache::new(), t0()),
        Err(CloudError::InsufficientCapacity { offerings: vec![] })
    );
}

#[tokio::test]
async fn the_plan_keeps_at_most_sixty_types() {
    let mut request = request(&sim(), &["on-demand"]).await;
    let template = request.instance_types[0].clone().into_owned();
    request.instance_types = (0..70)
        .map(|i| {
            let mut it = template.clone();
            it.name = format!("t{i:02}.large");
            for offering in &mut it.offerings {
                offering.price = Some(1.0 + f64::from(i));
            }
            Cow::Owned(it)
        })
        .collect();
    let plan = plan(&request, &IceCache::new(), t0()).unwrap();
    let mut types: Vec<_> = plan
        .overrides
        .iter()
        .map(|o| o.instance_type.clone())
        .collect();
    types.dedup();
    assert_eq!(types.len(), MAX_INSTANCE_TYPES);
    assert_eq!(types.first().map(String::as_str), Some("t00.large"));
    assert_eq!(types.last().map(String::as_str), Some("t59.large"));
}

#[tokio::test]
async fn resolution_picks_matching_subnets_groups_and_the_newest_ami_per_architecture() {
    let class = sim().resolve_node_class("default", &spec()).await.unwrap();
    let subnets: Vec<_> = class
        .resolved
        .subnets
        .iter()
        .map(|s| s.subnet.id.as_str())
        .collect();
    assert_eq!(subnets, ["subnet-a", "subnet-b"]);
    assert_eq!(class.resolved.security_groups[0].id, "sg-1");
    let amis: Vec<_> = class.resolved.amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(amis, ["ami-arm", "ami-new"]);
    assert_eq!(
        class.resolved.instance_profile.as_deref(),
        Some("test-cluster_default")
    );
}

#[tokio::test]
async fn a_class_whose_selectors_match_nothing_is_not_ready() {
    let mut spec = spec();
    spec.subnet_selector_terms = Some(vec![serde_json::from_value(
        serde_json::json!({"tags": {"karpenter.sh/discovery": "nobody"}}),
    )
    .unwrap()]);
    let error = sim()
        .resolve_node_class("default", &spec)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        CloudError::NodeClassNotReady {
            name: "default".into(),
            reason: "no subnet matches subnetSelectorTerms".into()
        }
    );
}

#[tokio::test]
async fn instance_types_offer_only_the_zones_of_the_class_subnets() {
    let cloud = sim();
    let class = cloud.resolve_node_class("default", &spec()).await.unwrap();
    let types = cloud.instance_types(&class, t0()).await.unwrap();
    let m5 = types.iter().find(|it| it.name == "m5.large").unwrap();
    let zones: std::collections::BTreeSet<_> =
        m5.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert_eq!(
        zones.into_iter().collect::<Vec<_>>(),
        ["us-west-2a", "us-west-2b"]
    );
    assert!(m5.offerings.iter().all(|o| o.zone_id.is_some()));
}

#[tokio::test]
async fn the_sim_launches_the_cheapest_pool_with_tags_and_a_provider_id() {
    let cloud = sim();
    let request = request(&cloud, &["on-demand"]).await;
    let instance = cloud.create(&request, t0()).await.unwrap();
    assert_eq!(instance.id, "i-00000000000000001");
    assert_eq!(
        instance.provider_id,
        "aws:///us-west-2a/i-00000000000000001"
    );
    assert_eq!(instance.instance_type, "c5.large");
    assert_eq!(instance.capacity_type, CapacityType::OnDemand);
    assert_eq!(instance.image_id, "ami-new");
    assert_eq!(instance.launch_time, t0());
    assert_eq!(instance.tags["karpenter.sh/nodeclaim"], "default-abc12");
    assert_eq!(cloud.get(&instance.provider_id).await.unwrap(), instance);
    assert_eq!(cloud.list().await.unwrap(), vec![instance.clone()]);
    let class = cloud.resolve_node_class("default", &spec()).await.unwrap();
    assert_eq!(drift(&instance, &class), None);
}

#[tokio::test]
async fn an_ice_on_the_cheapest_type_launches_the_next_and_marks_the_offering() {
    let cloud = sim();
    cloud.inject_insufficient_capacity(CapacityFault {
        instance_type: Some("c5.large".into()),
        ..CapacityFault::default()
    });
    let request = request(&cloud, &["on-demand"]).await;
    let instance = cloud.create(&request, t0()).await.unwrap();
    assert_eq!(instance.instance_type, "m5.large");
    let key = OfferingKey {
        capacity_type: CapacityType::OnDemand,
        instance_type: "c5.large".into(),
        zone: "us-west-2a".into(),
    };
    assert!(cloud.is_unavailable(&key, t0()));
    // The next listing shows the offering unavailable, so the next solve avoids it.
    let class = request.node_class.clone();
    let types = cloud
        .instance_types(&class, t0() + Duration::from_secs(1))
        .await
        .unwrap();
    let c5 = types.iter().find(|it| it.name == "c5.large").unwrap();
    assert!(c5
        .offerings
        .iter()
        .filter(|o| o.capacity_type == CapacityType::OnDemand)
        .all(|o| !o.available));
}

#[tokio::test]
async fn no_capacity_anywhere_is_insufficient_capacity_naming_the_pools_tried() {
    let cloud = sim();
    cloud.inject_insufficient_capacity(CapacityFault::default());
    let request = request(&cloud, &["on-demand"]).await;
    match cloud.create(&request, t0()).await {
        Err(CloudError::InsufficientCapacity { offerings }) => assert_eq!(offerings.len(), 6),
        other => panic!("expected insufficient capacity, got {other:?}"),
    }
    assert!(cloud.list().await.unwrap().is_empty());
    // Everything is in the ICE cache now: the next attempt has nothing left to try.
    assert_eq!(
        cloud.create(&request, t0()).await,
        Err(CloudError::InsufficientCapacity { offerings: vec![] })
    );
}

#[tokio::test]
async fn deleting_terminates_and_a_second_delete_or_get_is_not_found() {
    let cloud = sim();
    let request = request(&cloud, &["on-demand"]).await;
    let instance = cloud.create(&request, t0()).await.unwrap();
    cloud.delete(&instance.provider_id).await.unwrap();
    let not_found = CloudError::NotFound {
        provider_id: instance.provider_id.clone(),
    };
    assert_eq!(
        cloud.delete(&instance.provider_id).await,
        Err(not_found.clone())
    );
    assert_eq!(cloud.get(&instance.provider_id).await, Err(not_found));
    assert!(cloud.list().await.unwrap().is_empty());
    assert_eq!(
        cloud.instances()[&instance.id].state,
        InstanceState::Terminated
    );
    assert!(matches!(
        cloud.get("aws:///us-west-2a/not-an-id").await,
        Err(CloudError::InvalidRequest(_))
    ));
}

#[tokio::test]
async fn injected_api_errors_fail_the_next_calls_then_stop() {
    let cloud = sim();
    let error = CloudError::Api {
        operation: "CreateFleet",
        code: "RequestLimitExceeded".into(),
        message: "slow down".into(),
    };
    cloud.inject_api_error(Operation::Create, error.clone(), 2);
    let request = request(&cloud, &["on-demand"]).await;
    assert_eq!(cloud.create(&request, t0()).await, Err(error.clone()));
    assert_eq!(cloud.create(&request, t0()).await, Err(error));
    assert!(cloud.create(&request, t0()).await.is_ok());
    assert!(
        cloud.list().await.is_ok(),
        "other operations are unaffected"
    );
}

#[tokio::test]
async fn injected_latency_delays_the_call() {
    let cloud = sim();
    let request = request(&cloud, &["on-demand"]).await;
    cloud.set_latency(Operation::Create, Duration::from_millis(50));
    let started = tokio::time::Instant::now();
    cloud.create(&request, t0()).await.unwrap();
    // A lower bound only: the sleep guarantees it, however loaded the machine.
    assert!(started.elapsed() >= Duration::from_millis(50));
}

#[tokio::test]
async fn drift_is_judged_on_ami_then_subnet_then_security_groups() {
    let cloud = sim();
    let request = request(&cloud, &["on-demand"]).await;
    let instance = cloud.create(&request, t0()).await.unwrap();
    let class = request.node_class;
    let with = |f: &dyn Fn(&mut Instance)| {
        let mut i = instance.clone();
        f(&mut i);
        drift(&i, &class)
    };
    assert_eq!(
        with(&|i| i.image_id = "ami-old".into()),
        Some(DriftReason::AmiDrift)
    );
    assert_eq!(
        with(&|i| i.subnet_id = Some("subnet-x".into())),
        Some(DriftReason::SubnetDrift)
    );
    assert_eq!(
        with(&|i| i.security_group_ids.push("sg-2".into())),
        Some(DriftReason::SecurityGroupDrift)
    );
    assert_eq!(with(&|i| i.subnet_id = None), None);
}

#[tokio::test]
async fn a_deleted_class_takes_the_instance_profile_made_for_its_role() {
    let cloud = sim();
    let class = cloud.resolve_node_class("default", &spec()).await.unwrap();
    let profile = class.resolved.instance_profile.clone().expect("a profile");
    assert_eq!(cloud.instance_profiles(), [profile]);
    cloud.delete_node_class("default", &spec()).await.unwrap();
    assert!(cloud.instance_profiles().is_empty());
    cloud
        .delete_node_class("default", &spec())
        .await
        .expect("deleting again is done, not an error");
}

/// A zonal shift seen at the provider's next ask: no offering in the zone, no termination there; both return once
/// ARC no longer lists it.
#[tokio::test]
async fn a_zonal_shift_takes_the_zone_out_of_offerings_and_terminations_until_it_clears() {
    use super::zonal_shift::ZonalShift;
    let cloud = sim();
    let request = request(&cloud, &["on-demand"]).await;
    let instance = cloud.create(&request, t0()).await.unwrap();
    assert_eq!(zone_of(&instance.provider_id), Some("us-west-2a"));
    cloud.set_zonal_shifts(vec![ZonalShift {
        away_from: "usw2-a".into(),
        expiry: t0() + Duration::from_secs(3600),
        applied: true,
    }]);
    // Not seen until asked.
    let class = request.node_class.clone();
    let zones_available = |types: &[InstanceType]| {
        let m5 = types.iter().find(|it| it.name == "m5.large").unwrap();
        m5.offerings
            .iter()
            .filter(|o| o.available)
            .map(|o| o.zone.clone())
            .collect::<std::collections::BTreeSet<_>>()
    };
    let types = cloud.instance_types(&class, t0()).await.unwrap();
    assert_eq!(zones_available(&types).len(), 2);
    assert_eq!(
        cloud.zonal_shifts(t0()).await.unwrap(),
        std::collections::BTreeSet::from(["usw2-a".to_owned()])
    );
    let types = cloud.instance_types(&class, t0()).await.unwrap();
    assert_eq!(
        zones_available(&types).into_iter().collect::<Vec<_>>(),
        ["us-west-2b"]
    );
    assert!(matches!(
        cloud.delete(&instance.provider_id).await,
        Err(CloudError::ZonallyShifted { .. })
    ));
    assert_eq!(
        cloud.instances()[&instance.id].state,
        InstanceState::Running
    );
    // A launch now goes to the other zone.
    let request = self::request(&cloud, &["on-demand"]).await;
    assert_eq!(
        cloud.create(&request, t0()).await.unwrap().zone,
        "us-west-2b"
    );

    cloud.set_zonal_shifts(vec![]);
    assert!(cloud.zonal_shifts(t0()).await.unwrap().is_empty());
    let types = cloud.instance_types(&class, t0()).await.unwrap();
    assert_eq!(zones_available(&types).len(), 2);
    cloud.delete(&instance.provider_id).await.unwrap();
}
