//! The launch step against the in-memory cloud: a second attempt adopts the instance the first launched,
//! an out-of-capacity type is skipped by the next claim's launch, and what a launch writes on the claim.
//! Its fixtures (`cloud`, `claim`, `t0`) serve the other controllers' tests against the in-memory cloud too.

use super::launch::{adoptable, launched_labels, launched_status, Adoption, Launched};
use crate::api::ec2nodeclass::{SecurityGroup, Subnet};
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::{CapacityType, Catalog, CatalogSettings, Pricing};
use crate::cloud::sim::{CapacityFault, Operation, SimAmi, SimCloud, SimSecurityGroup, SimSubnet};
use crate::cloud::{CloudError, CloudProvider, NodeClass, ResolvedAmi};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

const CLUSTER: &str = "lifecycle";
const PRICES: &str = r#"{
  "onDemandUsdPerHour": {"us-west-2": {"c5.large": 0.085, "m5.large": 0.096}},
  "spotUsdPerHour": {"us-west-2": {"c5.large": 0.035, "m5.large": 0.04}}
}"#;

/// A launch as the lifecycle controller makes it, with the class's instance types at `now`.
pub(crate) async fn launch(
    cloud: &SimCloud,
    claim: &NodeClaim,
    class: NodeClass,
    now: SystemTime,
) -> Result<Launched, CloudError> {
    let types = cloud.instance_types(&class, now).await?;
    super::launch::launch(cloud, claim, class, &types, Adoption::Look, now).await
}

pub(crate) fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn discovery() -> BTreeMap<String, String> {
    BTreeMap::from([("karpenter.sh/discovery".to_owned(), CLUSTER.to_owned())])
}

pub(crate) fn cloud() -> SimCloud {
    let pricing = Pricing::from_json(PRICES).expect("prices");
    let catalog =
        Catalog::embedded("us-west-2", &CatalogSettings::default(), &pricing).expect("catalog");
    let types = catalog
        .instance_types
        .into_iter()
        .filter(|t| ["c5.large", "m5.large"].contains(&t.name.as_str()))
        .collect();
    let cloud = SimCloud::new(CLUSTER, types);
    cloud.add_subnet(SimSubnet {
        subnet: Subnet {
            id: "subnet-a".into(),
            zone: "us-west-2a".into(),
            zone_id: Some("usw2-az1".into()),
        },
        available_ips: 4000,
        tags: discovery(),
    });
    cloud.add_security_group(SimSecurityGroup {
        group: SecurityGroup {
            id: "sg-1".into(),
            name: None,
        },
        tags: discovery(),
    });
    cloud.add_ami(SimAmi {
        ami: ResolvedAmi {
            id: "ami-1".into(),
            name: None,
            architecture: "x86_64".into(),
            creation_date: Some("2026-01-01T00:00:00Z".into()),
            variants: Vec::new(),
            deprecated: false,
        },
        alias_family: Some("al2023".into()),
        tags: BTreeMap::new(),
    });
    cloud
}

async fn node_class(cloud: &SimCloud) -> NodeClass {
    let spec = serde_json::from_value(json!({
        "role": "NodeRole",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
    }))
    .expect("spec");
    cloud
        .resolve_node_class("default", &spec)
        .await
        .expect("the class resolves")
}

pub(crate) fn claim(name: &str) -> NodeClaim {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c5.large", "m5.large"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            ],
        },
    }))
    .expect("claim")
}

fn live_instances(cloud: &SimCloud) -> usize {
    cloud
        .instances()
        .values()
        .filter(|i| !i.state.is_gone())
        .count()
}

#[tokio::test]
async fn a_second_attempt_adopts_the_instance_of_the_first() {
    let cloud = cloud();
    let class = node_class(&cloud).await;
    let first = launch(&cloud, &claim("a"), class.clone(), t0())
        .await
        .expect("launch");
    assert!(!first.adopted);
    assert_eq!(first.instance.instance_type, "c5.large", "the cheapest");
    // As after a crash before the status write: the claim still has no provider ID.
    let again = launch(&cloud, &claim("a"), class.clone(), t0())
        .await
        .expect("second attempt");
    assert!(again.adopted);
    assert_eq!(again.instance.id, first.instance.id);
    assert_eq!(live_instances(&cloud), 1);
    // Another claim gets an instance of its own.
    let other = launch(&cloud, &claim("b"), class, t0()).await.expect("b");
    assert_ne!(other.instance.id, first.instance.id);
    assert_eq!(live_instances(&cloud), 2);
}

#[tokio::test]
async fn only_live_instances_of_the_claim_are_adoptable() {
    let cloud = cloud();
    let class = node_class(&cloud).await;
    let first = launch(&cloud, &claim("a"), class, t0())
        .await
        .expect("launch");
    let listed = cloud.list().await.expect("list");
    assert_eq!(
        adoptable(&listed, "a").map(|i| &i.id),
        Some(&first.instance.id)
    );
    assert!(adoptable(&listed, "b").is_none());
    cloud
        .delete(&first.instance.provider_id)
        .await
        .expect("delete");
    let mut terminated = first.instance.clone();
    terminated.state = crate::cloud::InstanceState::Terminated;
    assert!(adoptable(&[terminated], "a").is_none());
}

#[tokio::test]
async fn an_out_of_capacity_type_is_skipped_by_the_next_launch() {
    let cloud = cloud();
    let class = node_class(&cloud).await;
    cloud.inject_insufficient_capacity(CapacityFault {
        instance_type: Some("c5.large".into()),
        ..CapacityFault::default()
    });
    cloud.inject_insufficient_capacity(CapacityFault {
        instance_type: Some("m5.large".into()),
        ..CapacityFault::default()
    });
    let failed = launch(&cloud, &claim("a"), class.clone(), t0()).await;
    assert!(
        matches!(failed, Err(CloudError::InsufficientCapacity { ref offerings }) if offerings.len() == 2),
        "{failed:?}"
    );
    // Capacity comes back for m5.large only; c5.large stays in the ICE cache for the next claim.
    cloud.clear_insufficient_capacity();
    let unmarked = crate::cloud::OfferingKey {
        capacity_type: CapacityType::OnDemand,
        instance_type: "m5.large".into(),
        zone: "us-west-2a".into(),
    };
    assert!(cloud.is_unavailable(&unmarked, t0()));
    let later = t0() + crate::cloud::ICE_TTL + Duration::from_secs(1);
    cloud.inject_insufficient_capacity(CapacityFault {
        instance_type: Some("c5.large".into()),
        ..CapacityFault::default()
    });
    let first = launch(&cloud, &claim("b"), class.clone(), later)
        .await
        .expect("m5.large has capacity");
    assert_eq!(first.instance.instance_type, "m5.large");
    cloud.clear_insufficient_capacity();
    let next = launch(&cloud, &claim("c"), class, later + Duration::from_secs(1))
        .await
        .expect("launch");
    assert_eq!(
        next.instance.instance_type, "m5.large",
        "c5.large is avoided while its ICE entry lasts"
    );
}

#[tokio::test]
async fn cloud_errors_come_back_unchanged_and_launch_nothing() {
    let cloud = cloud();
    let class = node_class(&cloud).await;
    let error = CloudError::Api {
        operation: "CreateFleet",
        code: "RequestLimitExceeded".into(),
        message: "slow down".into(),
    };
    cloud.inject_api_error(Operation::Create, error.clone(), 1);
    let failed = launch(&cloud, &claim("a"), class, t0()).await;
    assert_eq!(failed.err(), Some(error));
    assert_eq!(live_instances(&cloud), 0);
}

#[tokio::test]
async fn a_claim_never_tried_launches_without_listing_instances() {
    let cloud = cloud();
    let class = node_class(&cloud).await;
    let types = cloud.instance_types(&class, t0()).await.expect("types");
    let error = CloudError::Api {
        operation: "DescribeInstances",
        code: "RequestLimitExceeded".into(),
        message: "slow down".into(),
    };
    cloud.inject_api_error(Operation::List, error.clone(), 1);
    let launch = |name: &str, adoption| {
        let claim = claim(name);
        let (cloud, class, types) = (&cloud, class.clone(), &types);
        async move { super::launch::launch(cloud, &claim, class, types, adoption, t0()).await }
    };
    let skipped = launch("a", Adoption::Skip).await;
    assert!(!skipped.expect("launched without a listing").adopted);
    // The injected error is still queued: only the launch that looks for an earlier instance lists.
    assert_eq!(launch("b", Adoption::Look).await.err(), Some(error));
    assert_eq!(live_instances(&cloud), 1);
}

#[tokio::test]
async fn a_launch_writes_type_zone_capacity_type_and_resources_on_the_claim() {
    let cloud = cloud();
    let class = node_class(&cloud).await;
    let launched = launch(&cloud, &claim("a"), class, t0())
        .await
        .expect("launch");
    let labels = launched_labels(&launched);
    for (key, value) in [
        ("node.kubernetes.io/instance-type", "c5.large"),
        ("topology.kubernetes.io/zone", "us-west-2a"),
        ("karpenter.sh/capacity-type", "on-demand"),
        ("kubernetes.io/arch", "amd64"),
    ] {
        assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
    }
    let status = launched_status(&launched);
    assert_eq!(status["providerID"], json!(launched.instance.provider_id));
    assert_eq!(status["imageID"], "ami-1");
    assert_eq!(status["capacity"]["cpu"], "2");
    assert!(status["allocatable"]["memory"].is_string());
}
