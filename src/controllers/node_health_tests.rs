//! The controller's part of node repair against a scripted apiserver: which requests a pass makes, in which
//! order, what it does with the apiserver's errors, and what it remembers between passes. The verdicts
//! themselves are [`crate::engine::repair`]'s, tested there.

use super::*;
use crate::cloud::sim::SimCloud;
use crate::controllers::state::{store_of, ClusterState};
use crate::controllers::testkit::{self, event, ApiServer, At, Exchange};
use serde_json::Value;
use std::sync::Mutex;
use std::time::SystemTime;

/// Every test's clock: 2027-01-15T08:00:00Z, [`NOW`].
fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// [`t0`] as the termination timestamp annotation writes it.
const NOW: &str = "2027-01-15T08:00:00Z";
const POOL: &str = "pool";
const MERGE_PATCH: &str = "application/merge-patch+json";
const IN_THE_POOL: &str = "more than 20% nodes are unhealthy in the nodepool";

fn provider_id(node: &str) -> String {
    format!("aws:///us-west-2a/i-{node}")
}

/// A spot Node `name` of `pool` whose `condition` has had `status` since `since`.
fn node(name: &str, pool: &str, (condition, status, since): (&str, &str, &str)) -> Node {
    kerf_testkit::node(
        name,
        json!({
            "metadata": {"labels": {labels::NODEPOOL: pool, labels::CAPACITY_TYPE: "spot"}},
            "spec": {"providerID": provider_id(name)},
            "status": {"conditions": [
                {"type": condition, "status": status, "lastTransitionTime": since}]},
        }),
    )
}

fn healthy(name: &str) -> Node {
    node(name, POOL, ("Ready", "True", "2027-01-15T00:00:00Z"))
}

/// Not ready for 31 minutes: past the 30 the `Ready` policy tolerates.
fn broken(name: &str) -> Node {
    node(name, POOL, ("Ready", "False", "2027-01-15T07:29:00Z"))
}

/// The NodeClaim `name` Node `node` was launched for, of `pool` (`None`: standalone) and image `ami-1`,
/// `patch` merged into it.
fn claim(name: &str, node: &str, pool: Option<&str>, patch: Value) -> NodeClaim {
    let mut object = json!({
        "metadata": {"labels": {}},
        "status": {"providerID": provider_id(node), "imageID": "ami-1"},
    });
    if let Some(pool) = pool {
        object["metadata"]["labels"][labels::NODEPOOL] = json!(pool);
    }
    kerf_testkit::merge(&mut object, patch);
    kerf_testkit::nodeclaim(name, object)
}

fn scripted(nodes: Vec<Node>, claims: Vec<NodeClaim>) -> (Context<SimCloud>, ApiServer) {
    let (client, server) = testkit::apiserver();
    let cloud = SimCloud::new("test", Vec::new());
    let state = ClusterState::of(nodes, claims, Vec::new());
    (testkit::context(client, cloud, state, t0()), server)
}

fn path(claim: &NodeClaim) -> String {
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    format!("/apis/karpenter.sh/v1/nodeclaims/{name}")
}

fn json_of(claim: &NodeClaim) -> Value {
    serde_json::to_value(claim).expect("a NodeClaim as JSON")
}

/// The merge patch that sets `claim`'s termination timestamp to `stamp`, and nothing else.
fn stamped(claim: &NodeClaim, stamp: &str) -> Exchange {
    Exchange::patch(&path(claim))
        .content_type(MERGE_PATCH)
        .body(json!({"metadata": {"annotations": {TERMINATION_TIMESTAMP: stamp}}}))
        .answer(200, json_of(claim))
}

fn deleted(claim: &NodeClaim) -> Exchange {
    let mut answer = json_of(claim);
    answer["metadata"]["deletionTimestamp"] = json!(NOW);
    Exchange::delete(&path(claim)).answer(200, answer)
}

/// A `NodeRepairBlocked` Warning on Node `node` saying `message`.
fn blocked(node: &'static str, message: &'static str) -> Exchange {
    event(NODE_REPAIR_BLOCKED, message).check(move |seen| {
        let body = &seen.body;
        assert_eq!(body["type"], "Warning", "{body}");
        assert_eq!(body["involvedObject"]["kind"], "Node", "{body}");
        assert_eq!(body["involvedObject"]["name"], node, "{body}");
    })
}

/// `karpenter_nodeclaims_disrupted_total{reason="unhealthy"}` for the spot nodes of [`POOL`].
fn disrupted(ctx: &Context<SimCloud>) -> u64 {
    let labels = DisruptedLabels {
        reason: "unhealthy".into(),
        nodepool: POOL.into(),
        capacity_type: "spot".into(),
    };
    ctx.metrics.lifecycle.disrupted.get_or_create(&labels).get()
}

/// `karpenter_nodeclaims_unhealthy_disrupted_total` for `condition` on the spot `ami-1` nodes of [`POOL`].
fn unhealthy_disrupted(ctx: &Context<SimCloud>, condition: &str) -> u64 {
    let labels = UnhealthyLabels {
        condition: condition.into(),
        nodepool: POOL.into(),
        capacity_type: "spot".into(),
        image_id: "ami-1".into(),
    };
    ctx.metrics
        .lifecycle
        .unhealthy_disrupted
        .get_or_create(&labels)
        .get()
}

/// One pass of [`run`] (its loop body), with what earlier passes did in `done`.
async fn pass(ctx: &Context<SimCloud>, done: &mut Done) {
    let now = now(ctx).expect("a clock in range");
    let repairs = judge(ctx, now);
    done.forget_gone(ctx);
    for repair in &repairs {
        carry_out(ctx, repair, done).await;
    }
}

/// Karpenter's "should delete nodes that are unhealthy by the cloud provider", "should set annotation
/// termination grace period when force termination is started" and "should fire a
/// karpenter_nodeclaims_disrupted_total metric when unhealthy": the claim is stamped with now first, then
/// deleted, and both counters name the condition, the Node's pool and capacity type and the claim's image.
/// The healthy Nodes around it get no request. (The cluster state of a test never changes, so `run` makes one
/// pass and returns.)
#[tokio::test]
async fn a_node_past_its_toleration_has_its_claim_stamped_then_deleted_and_counted() {
    // Accelerated hardware is tolerated for 10 minutes; this has been failing for 11.
    let sick = node(
        "n1",
        POOL,
        ("AcceleratedHardwareReady", "False", "2027-01-15T07:49:00Z"),
    );
    let claim = claim("c1", "n1", Some(POOL), json!({}));
    let mut nodes = vec![sick];
    nodes.extend(["n2", "n3", "n4", "n5"].map(healthy));
    let (ctx, mut server) = scripted(nodes, vec![claim.clone()]);
    let ctx = Arc::new(ctx);
    let script = vec![stamped(&claim, NOW), deleted(&claim)];
    server
        .serve(script, run(ctx.clone()))
        .await
        .expect("run ends with the state watch");
    assert_eq!(disrupted(&ctx), 1);
    assert_eq!(unhealthy_disrupted(&ctx, "accelerated_hardware_ready"), 1);
}

/// Karpenter's "should not delete node when health duration is not reached".
#[tokio::test]
async fn a_node_within_its_toleration_is_left_alone() {
    let waiting = node("n1", POOL, ("Ready", "False", "2027-01-15T07:31:00Z"));
    let claim = claim("c1", "n1", Some(POOL), json!({}));
    let (ctx, mut server) = scripted(vec![waiting], vec![claim]);
    let ctx = Arc::new(ctx);
    server
        .serve(vec![], run(ctx.clone()))
        .await
        .expect("a pass");
    assert_eq!(disrupted(&ctx), 0);
}

/// A claim is found by the Node's provider ID: a broken Node no claim was launched for is not Karpenter's
/// to repair, whatever claims there are.
#[tokio::test]
async fn an_unhealthy_node_no_claim_owns_is_never_repaired() {
    let other = claim("c9", "n9", Some(POOL), json!({}));
    let (ctx, mut server) = scripted(vec![broken("n1")], vec![other]);
    server
        .serve(vec![], run(Arc::new(ctx)))
        .await
        .expect("a pass");
}

/// Karpenter's "should not update termination grace period if set before the current time": the deadline
/// that has passed stays, and the claim is deleted without a patch.
#[tokio::test]
async fn a_deadline_already_passed_is_kept_and_the_claim_only_deleted() {
    let annotated =
        json!({"metadata": {"annotations": {TERMINATION_TIMESTAMP: "2027-01-15T07:57:00Z"}}});
    let claim = claim("c1", "n1", Some(POOL), annotated);
    let (ctx, mut server) = scripted(vec![broken("n1")], vec![claim.clone()]);
    let ctx = Arc::new(ctx);
    server
        .serve(vec![deleted(&claim)], run(ctx.clone()))
        .await
        .expect("a pass");
    assert_eq!(disrupted(&ctx), 1);
}

/// Karpenter's "should not respect termination grace period if set on the nodepool": a deadline still ahead
/// is brought forward to now.
#[tokio::test]
async fn a_deadline_still_ahead_is_brought_forward_to_now() {
    let annotated =
        json!({"metadata": {"annotations": {TERMINATION_TIMESTAMP: "2027-01-15T10:00:00Z"}}});
    let claim = claim("c1", "n1", Some(POOL), annotated);
    let (ctx, mut server) = scripted(vec![broken("n1")], vec![claim.clone()]);
    let script = vec![stamped(&claim, NOW), deleted(&claim)];
    server
        .serve(script, run(Arc::new(ctx)))
        .await
        .expect("a pass");
}

/// A claim termination already owns only has its deadline brought forward: no second delete, and nothing
/// counted (node repair did not disrupt it).
#[tokio::test]
async fn a_claim_already_being_deleted_is_stamped_but_not_deleted_again() {
    let deleting = json!({"metadata": {"deletionTimestamp": "2027-01-15T07:00:00Z",
                                       "finalizers": ["karpenter.sh/termination"]}});
    let claim = claim("c1", "n1", Some(POOL), deleting);
    let (ctx, mut server) = scripted(vec![broken("n1")], vec![claim.clone()]);
    let ctx = Arc::new(ctx);
    server
        .serve(vec![stamped(&claim, NOW)], run(ctx.clone()))
        .await
        .expect("a pass");
    assert_eq!(disrupted(&ctx), 0);
    assert_eq!(unhealthy_disrupted(&ctx, "ready"), 0);
}

/// A claim gone when it is stamped (404 on the patch: it is not deleted) or when it is deleted (404 on the
/// DELETE) is not counted as repaired: Karpenter ignores the NotFound and returns before its metrics.
#[tokio::test]
async fn a_claim_gone_before_its_stamp_or_its_delete_is_not_counted() {
    let claim = claim("c1", "n1", Some(POOL), json!({}));
    let scripts = [
        vec![stamped(&claim, NOW).fail(404, "NotFound")],
        vec![stamped(&claim, NOW), deleted(&claim).fail(404, "NotFound")],
    ];
    for script in scripts {
        let (ctx, mut server) = scripted(vec![broken("n1")], vec![claim.clone()]);
        let ctx = Arc::new(ctx);
        server
            .serve(script, run(ctx.clone()))
            .await
            .expect("a pass");
        assert_eq!(disrupted(&ctx), 0);
    }
}

/// Any other error on the stamp (a conflict here) stops this claim's repair before the delete, so that a
/// claim is never deleted without its deadline; the next pass stamps and deletes it.
#[tokio::test]
async fn a_conflict_on_the_stamp_leaves_the_claim_for_the_next_pass() {
    let claim = claim("c1", "n1", Some(POOL), json!({}));
    let (ctx, mut server) = scripted(vec![broken("n1")], vec![claim.clone()]);
    let mut done = Done::default();
    let conflict = vec![stamped(&claim, NOW).fail(409, "Conflict")];
    server.serve(conflict, pass(&ctx, &mut done)).await;
    assert_eq!(disrupted(&ctx), 0);
    assert!(done.deleted.is_empty());

    let script = vec![stamped(&claim, NOW), deleted(&claim)];
    server.serve(script, pass(&ctx, &mut done)).await;
    assert_eq!(disrupted(&ctx), 1);
    assert!(done.deleted.contains("c1"));
}

/// A delete the apiserver refuses (500) is not counted nor remembered as done: the next pass tries again,
/// and the claim is counted once, when its delete goes through.
#[tokio::test]
async fn a_refused_delete_is_retried_on_the_next_pass_and_counted_once() {
    let claim = claim("c1", "n1", Some(POOL), json!({}));
    let (ctx, mut server) = scripted(vec![broken("n1")], vec![claim.clone()]);
    let mut done = Done::default();
    let refused = vec![
        stamped(&claim, NOW),
        deleted(&claim).fail(500, "InternalError"),
    ];
    server.serve(refused, pass(&ctx, &mut done)).await;
    assert_eq!(disrupted(&ctx), 0);
    assert!(done.deleted.is_empty());

    let script = vec![stamped(&claim, NOW), deleted(&claim)];
    server.serve(script, pass(&ctx, &mut done)).await;
    assert_eq!(disrupted(&ctx), 1);
    assert_eq!(unhealthy_disrupted(&ctx, "ready"), 1);
}

/// A pass that works from a cluster state not showing its delete yet does not stamp, delete or count the
/// claim again; once the state shows the claim deleting with its deadline passed there is nothing to write, and
/// once the claim is gone it is forgotten.
#[tokio::test]
async fn a_deleted_claim_is_not_deleted_again_while_the_state_lags() {
    let claim = claim("c1", "n1", Some(POOL), json!({}));
    let (mut ctx, mut server) = scripted(vec![broken("n1")], vec![claim.clone()]);
    let mut done = Done::default();
    let script = vec![stamped(&claim, NOW), deleted(&claim)];
    server.serve(script, pass(&ctx, &mut done)).await;
    assert_eq!(disrupted(&ctx), 1);

    // A second later the state still shows the claim as it was: nothing is written, not even a later stamp
    // that would move its deadline.
    ctx.clock = Arc::new(At(t0() + Duration::from_secs(1)));
    server.serve(vec![], pass(&ctx, &mut done)).await;
    assert_eq!(disrupted(&ctx), 1);
    assert_eq!(unhealthy_disrupted(&ctx, "ready"), 1);

    // Then the state shows both writes.
    let written = self::claim(
        "c1",
        "n1",
        Some(POOL),
        json!({"metadata": {"annotations": {TERMINATION_TIMESTAMP: NOW},
                            "deletionTimestamp": NOW, "finalizers": ["karpenter.sh/termination"]}}),
    );
    ctx.state.node_claims = store_of(vec![written]);
    server.serve(vec![], pass(&ctx, &mut done)).await;
    assert!(done.deleted.contains("c1"));

    // Terminated: the claim is forgotten.
    ctx.state.node_claims = store_of(Vec::new());
    server.serve(vec![], pass(&ctx, &mut done)).await;
    assert!(done.deleted.is_empty());
    assert_eq!(disrupted(&ctx), 1);
}

/// Karpenter's "should ignore unhealthy nodes if more then 20% of the nodes are unhealthy": with both Nodes
/// of the pool broken, neither claim is touched and each Node gets a `NodeRepairBlocked` Warning.
#[tokio::test]
async fn too_many_unhealthy_nodes_in_the_pool_block_repair_with_an_event_on_each_node() {
    let claims = vec![
        claim("c1", "n1", Some(POOL), json!({})),
        claim("c2", "n2", Some(POOL), json!({})),
    ];
    let (ctx, mut server) = scripted(vec![broken("n1"), broken("n2")], claims);
    let ctx = Arc::new(ctx);
    let named = Arc::new(Mutex::new(Vec::new()));
    let on_a_node = |named: Arc<Mutex<Vec<String>>>| {
        event(NODE_REPAIR_BLOCKED, IN_THE_POOL).check(move |seen| {
            assert_eq!(seen.body["type"], "Warning", "{}", seen.body);
            assert_eq!(seen.body["involvedObject"]["kind"], "Node", "{}", seen.body);
            let name = seen.body["involvedObject"]["name"].as_str();
            named
                .lock()
                .expect("lock")
                .push(name.unwrap_or_default().to_owned());
        })
    };
    // The store's order is not fixed: which Node comes first is not.
    let script = vec![on_a_node(named.clone()), on_a_node(named.clone())];
    server
        .serve(script, run(ctx.clone()))
        .await
        .expect("a pass");
    let mut named = named.lock().expect("lock").clone();
    named.sort();
    assert_eq!(named, ["n1", "n2"]);
    assert_eq!(disrupted(&ctx), 0);
}

/// The `NodeRepairBlocked` Event on a Node is published at most once every 15 minutes (Karpenter's recorder
/// dedupes it so), however many passes judge the Node blocked meanwhile.
#[tokio::test]
async fn a_blocked_node_gets_its_event_again_only_after_fifteen_minutes() {
    // n2 has no claim: it counts as unhealthy in the pool but gets no verdict of its own.
    let claims = vec![claim("c1", "n1", Some(POOL), json!({}))];
    let (ctx, mut server) = scripted(vec![broken("n1"), broken("n2")], claims);
    let mut done = Done::default();
    server
        .serve(vec![blocked("n1", IN_THE_POOL)], pass(&ctx, &mut done))
        .await;
    server.serve(vec![], pass(&ctx, &mut done)).await;

    let published_ago = |done: &mut Done, minutes: u64| {
        let at = Instant::now()
            .checked_sub(Duration::from_secs(minutes * 60))
            .expect("an instant that long ago");
        done.published.insert("n1".to_owned(), at);
    };
    published_ago(&mut done, 14);
    server.serve(vec![], pass(&ctx, &mut done)).await;
    published_ago(&mut done, 16);
    server
        .serve(vec![blocked("n1", IN_THE_POOL)], pass(&ctx, &mut done))
        .await;
}

/// A claim without a NodePool label is judged against the whole cluster, whatever pool its Node's label
/// names: here its Node's pool is healthy enough, the cluster is not, and the Event says so in Karpenter's
/// words.
#[tokio::test]
async fn a_claim_without_a_pool_is_held_back_by_the_share_of_the_whole_cluster() {
    let mut nodes = vec![broken("n1")];
    nodes.extend(["n2", "n3", "n4", "n5"].map(healthy));
    // Another pool, all broken, whose Nodes no claim owns: 4 of 8 unhealthy in the cluster.
    nodes.extend(
        ["q1", "q2", "q3"]
            .map(|name| node(name, "other", ("Ready", "Unknown", "2027-01-15T07:00:00Z"))),
    );
    let standalone = claim("c1", "n1", None, json!({}));
    let (ctx, mut server) = scripted(nodes, vec![standalone]);
    let script = vec![blocked(
        "n1",
        "more then 20% nodes are unhealthy in the cluster",
    )];
    server
        .serve(script, run(Arc::new(ctx)))
        .await
        .expect("a pass");
}
