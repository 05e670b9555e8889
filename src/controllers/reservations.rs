//! Capacity reservations after launch, every minute (Karpenter's `capacityreservation.capacitytype` and
//! `capacityreservation.expiration` controllers): NodeClaims and Nodes whose reservation ended are demoted to
//! `on-demand`, and NodeClaims in an expiring capacity block are deleted so their pods drain before EC2 reclaims
//! the instances. The decisions are [`crate::engine::reservations`]'; this module reads and writes.

use super::kit::calls;
use super::{Context, Error};
use crate::api::labels;
use crate::api::nodeclaim::NodeClaim;
use crate::cloud::CloudProvider;
use crate::engine::reservations::{demotion_patch, expiring, runs_on_demand};
use ::kube::Api;
use k8s_openapi::api::core::v1::Node;
use std::collections::HashMap;
use std::sync::Arc;

/// Runs both passes every `Settings::reservation_sync_interval` (Karpenter requeues both singletons after a
/// minute) until the task is dropped; a failed pass is logged and retried next time.
pub async fn run<C: CloudProvider + 'static>(ctx: Arc<Context<C>>) -> Result<(), Error> {
    let mut ticker = tokio::time::interval(ctx.settings.reservation_sync_interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if let Err(error) = demote(&ctx).await {
            tracing::warn!(%error, "capacity-type sync failed; retrying at the next interval");
        }
        delete_expiring(&ctx).await;
    }
}

/// Demotes the claims (and their registered Nodes) whose instances EC2 now lists as on-demand.
async fn demote<C: CloudProvider>(ctx: &Context<C>) -> Result<(), Error> {
    let instances: HashMap<String, _> = ctx
        .cloud
        .list()
        .await?
        .into_iter()
        .map(|i| (i.provider_id, i.capacity_type))
        .collect();
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let all_nodes = ctx.state.nodes.state();
    for claim in ctx.state.node_claims.state() {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.as_deref());
        if !runs_on_demand(&instances, provider_id) {
            continue;
        }
        let name = claim.metadata.name.clone().unwrap_or_default();
        if let Some(patch) = claim.metadata.labels.as_ref().and_then(demotion_patch) {
            match calls::merge_patch(&claims, &name, patch).await {
                Ok(()) => {
                    tracing::info!(nodeclaim = %name, "demoted from reserved to on-demand: its capacity reservation ended")
                }
                Err(error) => {
                    tracing::warn!(nodeclaim = %name, %error, "could not demote a NodeClaim")
                }
            }
        }
        // Its Nodes (one, unless a user made a duplicate), once registered: before that their labels may not be
        // synced yet, and the next pass gets them.
        for node in all_nodes.iter().filter(|n| {
            n.metadata.deletion_timestamp.is_none()
                && n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == provider_id
        }) {
            let Some(node_labels) = node.metadata.labels.as_ref() else {
                continue;
            };
            if node_labels.get(labels::NODE_REGISTERED).map(String::as_str) != Some("true") {
                continue;
            }
            let Some(patch) = demotion_patch(node_labels) else {
                continue;
            };
            let node_name = node.metadata.name.clone().unwrap_or_default();
            if let Err(error) = calls::merge_patch(&nodes, &node_name, patch).await {
                tracing::warn!(node = %node_name, %error, "could not demote a Node");
            }
        }
    }
    Ok(())
}

/// Deletes the claims in capacity blocks the EC2NodeClasses list as expiring; termination drains them.
async fn delete_expiring<C: CloudProvider>(ctx: &Context<C>) {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    let claims = ctx.state.node_claims.state();
    for name in expiring(&claims, &ctx.state.node_classes.state()) {
        let reservation = claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name.as_str()))
            .and_then(|c| {
                c.metadata
                    .labels
                    .as_ref()?
                    .get(crate::catalog::CAPACITY_RESERVATION_ID)
                    .cloned()
            });
        match calls::delete(&api, &name).await {
            Ok(()) => {
                tracing::info!(nodeclaim = %name, capacity_reservation_id = ?reservation, "initiating delete for capacity block expiration")
            }
            Err(error) => {
                tracing::warn!(nodeclaim = %name, %error, "could not delete a NodeClaim of an expiring capacity block")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The reservation passes against a scripted apiserver ([`crate::controllers::testkit`]) and a cloud whose
    //! instance list is scripted: which claims and Nodes are patched or deleted, with which bodies, in which
    //! order, and what a refused request or a failed list leaves. The decisions are tested in
    //! [`crate::engine::reservations`]. Karpenter's references are the AWS provider's
    //! `capacityreservation/capacitytype` and `capacityreservation/expiration` controllers.

    use super::*;
    use crate::api::ec2nodeclass::{EC2NodeClass, EC2NodeClassSpec};
    use crate::catalog::{CapacityType, InstanceType, CAPACITY_RESERVATION_TYPE};
    use crate::cloud::{
        provider_id, CloudError, Instance, InstanceHealth, InstanceState, LaunchRefusal,
        LaunchRequest, NodeClass, OfferingKey,
    };
    use crate::controllers::state::{store_of, ClusterState};
    use crate::controllers::testkit::{self, ApiServer, Exchange};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::{json, Value};
    use std::collections::{BTreeMap, BTreeSet, VecDeque};
    use std::sync::Mutex;
    use std::time::{Duration, SystemTime};

    const CLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";
    const MERGE_PATCH: &str = "application/merge-patch+json";

    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }

    fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        mutex
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A cloud whose instance lists are scripted, one per pass; nothing else is asked of it.
    struct Ec2 {
        lists: Mutex<VecDeque<Result<Vec<Instance>, CloudError>>>,
    }

    impl Ec2 {
        fn listing(lists: impl IntoIterator<Item = Result<Vec<Instance>, CloudError>>) -> Ec2 {
            Ec2 {
                lists: Mutex::new(lists.into_iter().collect()),
            }
        }
    }

    impl CloudProvider for Ec2 {
        async fn list(&self) -> Result<Vec<Instance>, CloudError> {
            lock(&self.lists)
                .pop_front()
                .expect("one instance list per pass, as scripted")
        }
        async fn resolve_node_class(
            &self,
            _: &str,
            _: &EC2NodeClassSpec,
        ) -> Result<NodeClass, CloudError> {
            unreachable!("the reservation passes resolve no class")
        }
        async fn instance_types(
            &self,
            _: &NodeClass,
            _: SystemTime,
        ) -> Result<Vec<InstanceType>, CloudError> {
            unreachable!("the reservation passes read no catalog")
        }
        async fn create(
            &self,
            _: &LaunchRequest<'_>,
            _: SystemTime,
        ) -> Result<Instance, CloudError> {
            unreachable!("the reservation passes launch nothing")
        }
        async fn get(&self, _: &str) -> Result<Instance, CloudError> {
            unreachable!("the reservation passes list, they do not get")
        }
        async fn delete(&self, _: &str) -> Result<(), CloudError> {
            unreachable!("the reservation passes terminate nothing")
        }
        fn mark_unavailable(&self, _: OfferingKey, _: SystemTime) {
            unreachable!("the reservation passes mark no offering")
        }
        async fn check_launch(
            &self,
            _: &LaunchRequest<'_>,
            _: SystemTime,
        ) -> Result<Option<LaunchRefusal>, CloudError> {
            unreachable!("the reservation passes check no launch")
        }
        async fn delete_node_class(&self, _: &str, _: &EC2NodeClassSpec) -> Result<(), CloudError> {
            unreachable!("the reservation passes delete no class")
        }
        async fn instance_health(&self) -> Result<Vec<InstanceHealth>, CloudError> {
            unreachable!("the reservation passes read no health")
        }
        async fn zonal_shifts(&self, _: SystemTime) -> Result<BTreeSet<String>, CloudError> {
            unreachable!("the reservation passes follow no zonal shift")
        }
        async fn collect_garbage(&self, _: SystemTime) -> Result<usize, CloudError> {
            unreachable!("the reservation passes collect no garbage")
        }
    }

    /// The running instance `id` of `capacity_type`, as EC2 lists it.
    fn instance(id: &str, capacity_type: CapacityType) -> Instance {
        Instance {
            id: id.to_owned(),
            provider_id: provider_id("us-west-2a", id),
            instance_type: "p5.48xlarge".to_owned(),
            zone: "us-west-2a".to_owned(),
            capacity_type,
            image_id: "ami-1".to_owned(),
            launch_time: t0(),
            state: InstanceState::Running,
            subnet_id: None,
            security_group_ids: vec![],
            tags: BTreeMap::new(),
            reservation: None,
            placement: None,
        }
    }

    fn throttled() -> CloudError {
        CloudError::Api {
            operation: "DescribeInstances",
            code: "RequestLimitExceeded".into(),
            message: "Request limit exceeded.".into(),
        }
    }

    /// The labels of capacity launched into the capacity block `cr-block`.
    fn reserved() -> Value {
        json!({labels::CAPACITY_TYPE: "reserved", crate::catalog::CAPACITY_RESERVATION_ID: "cr-block",
               CAPACITY_RESERVATION_TYPE: "capacity-block"})
    }

    fn on_demand() -> Value {
        json!({labels::CAPACITY_TYPE: "on-demand"})
    }

    /// The merge patch that demotes reserved capacity to on-demand.
    fn demotion() -> Value {
        json!({"metadata": {"labels": {labels::CAPACITY_TYPE: "on-demand",
            crate::catalog::CAPACITY_RESERVATION_ID: null, CAPACITY_RESERVATION_TYPE: null}}})
    }

    /// A claim `name` labelled `labels`, launched as the instance `id` when given.
    fn claim(name: &str, id: Option<&str>, labels: Value) -> NodeClaim {
        let status = match id {
            Some(id) => json!({"providerID": provider_id("us-west-2a", id)}),
            None => json!({}),
        };
        kerf_testkit::nodeclaim(
            name,
            json!({"metadata": {"labels": labels}, "status": status}),
        )
    }

    /// The Node `name` of the instance `id`, labelled `labels`, registered or not.
    fn node(name: &str, id: &str, mut labels: Value, registered: bool) -> Node {
        if registered {
            labels[labels::NODE_REGISTERED] = json!("true");
        }
        kerf_testkit::node(
            name,
            json!({"metadata": {"labels": labels}, "spec": {"providerID": provider_id("us-west-2a", id)}}),
        )
    }

    fn deleting<K: ::kube::Resource>(mut object: K) -> K {
        object.meta_mut().deletion_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::try_from(t0()).expect("in range"),
        ));
        object
    }

    /// The EC2NodeClass `default` whose status lists the capacity block `cr-block` as expiring and `cr-ok` as
    /// active.
    fn class_with_expiring_block() -> EC2NodeClass {
        let reservation = |id: &str, state: &str| {
            json!({"availabilityZone": "us-west-2a", "id": id, "instanceMatchCriteria": "targeted",
                   "instanceType": "p5.48xlarge", "ownerID": "012345678901",
                   "reservationType": "capacity-block", "state": state})
        };
        let mut class =
            serde_json::to_value(kerf_testkit::ec2nodeclass("default", json!({}))).expect("json");
        class["status"] = json!({"capacityReservations": [
            reservation("cr-block", "expiring"), reservation("cr-ok", "active")]});
        serde_json::from_value(class).expect("an EC2NodeClass")
    }

    /// A context over a scripted apiserver and `cloud`, the state holding `claims`, `nodes` and `classes`.
    fn scripted(
        cloud: Ec2,
        claims: Vec<NodeClaim>,
        nodes: Vec<Node>,
        classes: Vec<EC2NodeClass>,
    ) -> (Context<Ec2>, ApiServer) {
        let (client, server) = testkit::apiserver();
        let mut state = ClusterState::of(nodes, claims, Vec::new());
        state.node_classes = store_of(classes);
        (testkit::context(client, cloud, state, t0()), server)
    }

    fn demoted(path: &str) -> Exchange {
        Exchange::patch(path)
            .content_type(MERGE_PATCH)
            .body(demotion())
    }

    /// Karpenter's "should demote nodeclaims and nodes from reserved to on-demand": a claim EC2 now lists as
    /// on-demand gets one merge patch setting `capacity-type: on-demand` and removing the reservation labels, then
    /// its registered Node the same.
    #[tokio::test]
    async fn a_claim_and_its_node_whose_reservation_ended_are_demoted_to_on_demand() {
        let cloud = Ec2::listing([Ok(vec![instance("i-1", CapacityType::OnDemand)])]);
        let (ctx, mut server) = scripted(
            cloud,
            vec![claim("a", Some("i-1"), reserved())],
            vec![node("n-a", "i-1", reserved(), true)],
            vec![],
        );
        let script = vec![
            demoted(&format!("{CLAIMS}/a")),
            demoted("/api/v1/nodes/n-a"),
        ];
        server.serve(script, demote(&ctx)).await.expect("a pass");
    }

    /// Only what EC2 lists as on-demand is demoted: not a claim whose instance is still reserved (nor its Node),
    /// not one whose instance the list lacks (garbage collection's case), not one not launched yet, and not one
    /// being deleted.
    #[tokio::test]
    async fn claims_still_reserved_unlisted_unlaunched_or_being_deleted_are_not_demoted() {
        let cloud = Ec2::listing([Ok(vec![
            instance("i-1", CapacityType::Reserved),
            instance("i-3", CapacityType::OnDemand),
        ])]);
        let claims = vec![
            claim("still-reserved", Some("i-1"), reserved()),
            claim("unlisted", Some("i-2"), reserved()),
            claim("unlaunched", None, reserved()),
            deleting(claim("going", Some("i-3"), reserved())),
        ];
        let nodes = vec![node("n-1", "i-1", reserved(), true)];
        let (ctx, mut server) = scripted(cloud, claims, nodes, vec![]);
        server.serve(vec![], demote(&ctx)).await.expect("a pass");
    }

    /// Karpenter's "should demote nodes even if their nodeclaim was demoted previously": a claim already
    /// on-demand is not patched, its registered Node still labelled reserved is; a Node of the same instance not
    /// registered yet (its labels may not be synced), one being deleted, and another instance's Node are not.
    #[tokio::test]
    async fn a_node_is_demoted_by_its_own_labels_once_registered_and_not_while_deleting() {
        let cloud = Ec2::listing([Ok(vec![instance("i-1", CapacityType::OnDemand)])]);
        let nodes = vec![
            node("n-registered", "i-1", reserved(), true),
            node("n-unregistered", "i-1", reserved(), false),
            deleting(node("n-deleting", "i-1", reserved(), true)),
            node("n-other", "i-2", reserved(), true),
        ];
        let (ctx, mut server) = scripted(
            cloud,
            vec![claim("a", Some("i-1"), on_demand())],
            nodes,
            vec![],
        );
        let script = vec![demoted("/api/v1/nodes/n-registered")];
        server.serve(script, demote(&ctx)).await.expect("a pass");
    }

    /// A claim patch the apiserver refuses (500) is logged: its Node is still demoted and the pass succeeds;
    /// the next pass, finding the claim still reserved, patches it again.
    #[tokio::test]
    async fn a_refused_claim_demotion_still_demotes_its_node_and_is_retried_next_pass() {
        let on_demand_now = || Ok(vec![instance("i-1", CapacityType::OnDemand)]);
        let cloud = Ec2::listing([on_demand_now(), on_demand_now()]);
        let (ctx, mut server) = scripted(
            cloud,
            vec![claim("a", Some("i-1"), reserved())],
            vec![node("n-a", "i-1", on_demand(), true)],
            vec![],
        );
        let script = vec![demoted(&format!("{CLAIMS}/a")).fail(500, "InternalError")];
        server
            .serve(script, demote(&ctx))
            .await
            .expect("a refused patch does not fail the pass");
        let script = vec![demoted(&format!("{CLAIMS}/a"))];
        server.serve(script, demote(&ctx)).await.expect("a pass");
    }

    /// An instance list that fails says nothing about capacity types: nothing is patched and the pass fails
    /// (logged by [`run`], retried at the next interval).
    #[tokio::test]
    async fn a_failed_instance_list_demotes_nothing() {
        let cloud = Ec2::listing([Err(throttled())]);
        let (ctx, mut server) = scripted(
            cloud,
            vec![claim("a", Some("i-1"), reserved())],
            vec![node("n-a", "i-1", reserved(), true)],
            vec![],
        );
        let result = server.serve(vec![], demote(&ctx)).await;
        assert!(matches!(result, Err(Error::Cloud(_))), "{result:?}");
    }

    /// The expiration controller: a claim in a capacity block the EC2NodeClass lists as expiring is deleted; one
    /// in an active reservation, one with none, and one already being deleted are not.
    #[tokio::test]
    async fn a_claim_in_an_expiring_capacity_block_is_deleted() {
        let in_ok = {
            let mut labels = reserved();
            labels[crate::catalog::CAPACITY_RESERVATION_ID] = json!("cr-ok");
            claim("in-ok", Some("i-2"), labels)
        };
        let claims = vec![
            claim("in-block", Some("i-1"), reserved()),
            in_ok,
            claim("on-demand", Some("i-3"), on_demand()),
            deleting(claim("already-going", Some("i-4"), reserved())),
        ];
        let (ctx, mut server) = scripted(
            Ec2::listing([]),
            claims,
            vec![],
            vec![class_with_expiring_block()],
        );
        let going = serde_json::to_value(deleting(claim("in-block", Some("i-1"), reserved())))
            .expect("json");
        let script = vec![Exchange::delete(&format!("{CLAIMS}/in-block")).answer(200, going)];
        server.serve(script, delete_expiring(&ctx)).await;
    }

    /// A delete refused (500) or of a claim already gone (404) is logged and stops none of the other deletes.
    /// (The store's order is not fixed: the answer goes by the path.)
    #[tokio::test]
    async fn a_refused_or_missing_expiring_claim_does_not_stop_the_others() {
        let claims = vec![
            claim("refused", Some("i-1"), reserved()),
            claim("gone", Some("i-2"), reserved()),
        ];
        let (ctx, mut server) = scripted(
            Ec2::listing([]),
            claims,
            vec![],
            vec![class_with_expiring_block()],
        );
        let asked = std::sync::Arc::new(Mutex::new(Vec::new()));
        let delete = |asked: std::sync::Arc<Mutex<Vec<String>>>| {
            Exchange::delete(&format!("{CLAIMS}/*")).answer_with(move |seen| {
                let name = seen.path.rsplit('/').next().unwrap_or_default().to_owned();
                lock(&asked).push(name.clone());
                match name.as_str() {
                    "refused" => (500, testkit::status(500, "InternalError", "etcd")),
                    _ => (404, testkit::status(404, "NotFound", "gone")),
                }
            })
        };
        let script = vec![delete(asked.clone()), delete(asked.clone())];
        server.serve(script, delete_expiring(&ctx)).await;
        let mut asked = lock(&asked).clone();
        asked.sort();
        assert_eq!(asked, ["gone", "refused"]);
    }

    /// Every interval, demotion then the expiring deletes; an instance list that fails skips only the demotion
    /// of that pass, and the claims are looked at again at the next interval. (The clock is paused: the
    /// intervals pass without waiting.)
    #[tokio::test(start_paused = true)]
    async fn each_interval_demotes_then_deletes_and_a_failed_list_skips_only_the_demotion() {
        let cloud = Ec2::listing([
            Err(throttled()),
            Ok(vec![instance("i-1", CapacityType::OnDemand)]),
        ]);
        let mut active = reserved();
        active[crate::catalog::CAPACITY_RESERVATION_ID] = json!("cr-ok");
        let claims = vec![
            claim("ended", Some("i-1"), active),
            claim("expiring", Some("i-2"), reserved()),
        ];
        let (mut ctx, mut server) =
            scripted(cloud, claims, vec![], vec![class_with_expiring_block()]);
        let interval = Duration::from_secs(1);
        ctx.settings.reservation_sync_interval = interval;
        let expiring = || Exchange::delete(&format!("{CLAIMS}/expiring")).fail(404, "NotFound");
        let script = vec![expiring(), demoted(&format!("{CLAIMS}/ended")), expiring()];
        let two_passes = tokio::time::timeout(interval * 3 / 2, run(std::sync::Arc::new(ctx)));
        let ended = server.serve(script, two_passes).await;
        assert!(ended.is_err(), "run goes on until it is dropped");
    }
}
