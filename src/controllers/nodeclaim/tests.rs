//! The launch step against the in-memory cloud: a second attempt adopts the instance the first launched,
//! an out-of-capacity type is skipped by the next claim's launch, and what a launch writes on the claim.
//! Its fixtures (`cloud`, `claim`, `t0`) serve the other controllers' tests against the in-memory cloud too.
//! Then whole lifecycle reconciles against a scripted apiserver ([`crate::controllers::testkit`]).

use super::launch::{adoptable, launched_labels, launched_status, Adoption, Launched};
use crate::api::nodeclaim::NodeClaim;
use crate::catalog::{CapacityType, Catalog, CatalogSettings, Pricing};
use crate::cloud::sim::{CapacityFault, Operation, SimCloud};
use crate::cloud::{CloudError, CloudProvider, NodeClass};
use crate::controllers::testkit;
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
    testkit::add_network(
        &cloud,
        &[("subnet-a", "us-west-2a", "usw2-az1")],
        4000,
        &discovery(),
    );
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

/// A claim of pool `default` created `age` before [`t0`], labelled with its class, with the termination finalizer
/// when `finalized`.
fn stored_claim(age: Duration, finalized: bool) -> NodeClaim {
    let created = k8s_openapi::jiff::Timestamp::try_from(t0() - age).expect("a time");
    let mut claim = claim("c");
    claim.metadata.uid = Some("c-uid".into());
    claim.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        created,
    ));
    claim
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("karpenter.k8s.aws/ec2nodeclass".into(), "default".into());
    if finalized {
        claim.metadata.finalizers = Some(vec![super::TERMINATION_FINALIZER.into()]);
    }
    claim
}

fn scripted(
    claims: Vec<NodeClaim>,
) -> (
    std::sync::Arc<crate::controllers::Context<SimCloud>>,
    crate::controllers::testkit::ApiServer,
) {
    use crate::controllers::{state::ClusterState, testkit};
    let (client, server) = testkit::apiserver();
    let state = ClusterState::of(vec![], claims, vec![]);
    let ctx = testkit::context(client, SimCloud::new(CLUSTER, Vec::new()), state, t0());
    (std::sync::Arc::new(ctx), server)
}

/// A new claim gets the termination finalizer before anything else is done with it (Karpenter's lifecycle "should
/// add the finalizer if it doesn't exist"); with its EC2NodeClass missing it is then marked `Launched=False`
/// (`NodeClassNotReady`) with a Warning Event and looked at again in 10 s (docs/lifecycle.md), not deleted.
#[tokio::test]
async fn a_new_claim_of_a_missing_class_is_finalized_then_marked_not_launched() {
    use crate::controllers::testkit::{event, Exchange};
    let claim = stored_claim(Duration::from_secs(60), false);
    let (ctx, mut server) = scripted(vec![claim.clone()]);
    let path = "/apis/karpenter.sh/v1/nodeclaims/c";
    let stored = serde_json::to_value(&claim).expect("json");
    let script = vec![
        Exchange::patch(path)
            .content_type("application/json-patch+json")
            .body(json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": [super::TERMINATION_FINALIZER]},
            ]))
            .answer(200, stored.clone()),
        // The store may lag the claim's own launch: the apiserver is asked before launching.
        Exchange::get(path).answer(200, stored.clone()),
        event("NodeClassNotReady", "EC2NodeClass default is not ready"),
        Exchange::patch(&format!("{path}/status"))
            .check(|seen| {
                let conditions = seen.body["status"]["conditions"].as_array().expect("conditions");
                let launched = conditions
                    .iter()
                    .find(|c| c["type"] == "Launched")
                    .expect("a Launched condition");
                assert_eq!(launched["status"], "False");
                assert_eq!(launched["reason"], "NodeClassNotReady");
            })
            .answer(200, stored),
    ];
    let action = server
        .serve(
            script,
            super::reconcile(std::sync::Arc::new(claim), ctx.clone()),
        )
        .await
        .expect("a reconcile");
    assert_eq!(
        action,
        ::kube::runtime::controller::Action::requeue(super::WAIT_RECHECK)
    );
}

/// Karpenter's liveness "should delete the NodeClaim when the NodeClaim hasn't launched past the launch timeout":
/// the claim is deleted (its pods are provisioned again) and the failure counts against its pool's registration
/// health (a pool that is gone is left alone).
#[tokio::test]
async fn a_claim_not_launched_within_the_launch_timeout_is_deleted() {
    use crate::controllers::testkit::Exchange;
    let claim = stored_claim(super::liveness::LAUNCH_TTL + Duration::from_secs(1), true);
    let (ctx, mut server) = scripted(vec![claim.clone()]);
    let deleted = serde_json::to_value(&claim).expect("json");
    let script = vec![
        Exchange::delete("/apis/karpenter.sh/v1/nodeclaims/c").answer(200, deleted),
        Exchange::get("/apis/karpenter.sh/v1/nodepools/default").fail(404, "NotFound"),
    ];
    let action = server
        .serve(
            script,
            super::reconcile(std::sync::Arc::new(claim), ctx.clone()),
        )
        .await
        .expect("a reconcile");
    assert_eq!(action, ::kube::runtime::controller::Action::await_change());
    let disrupted = ctx
        .metrics
        .lifecycle
        .disrupted
        .get_or_create(&crate::controllers::metrics::DisruptedLabels {
            reason: "launch_timeout".into(),
            nodepool: "default".into(),
            capacity_type: String::new(),
        })
        .get();
    assert_eq!(disrupted, 1);
}
