//! Static capacity's part against a scripted apiserver ([`crate::controllers::testkit`]): the NodeClaims a pass
//! creates or deletes (paths, bodies, order), what it remembers between passes so that it does not write twice
//! before the cluster state shows its writes, how it takes a 409, a 404 or a 5xx, and the metric and Events it
//! produces. The decision itself ([`crate::engine::static_capacity::scale`]) is tested in the core.
//!
//! Karpenter's references are `pkg/controllers/static/provisioning` and `static/deprovisioning` (their suite
//! tests are cited by name).

use super::*;
use crate::cloud::sim::SimCloud;
use crate::controllers::state::{store_of, ClusterState};
use crate::controllers::testkit::{self, ApiServer, Exchange, Seen};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{json, Value};
use std::sync::Mutex;
use std::time::SystemTime;

const CLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";
const POOL: &str = "fixed";

fn t0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

fn now() -> Timestamp {
    Timestamp::try_from(t0()).expect("in range")
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The NodePool `name` of the `default` EC2NodeClass, `spec` merged into its spec (`replicas`, `limits`).
fn pool_named(name: &str, spec: Value) -> NodePool {
    let mut pool = serde_json::to_value(testkit::node_pool(name)).expect("json");
    kerf_testkit::merge(&mut pool["spec"], spec);
    serde_json::from_value(pool).expect("a NodePool")
}

/// The static pool `fixed` keeping `replicas` nodes.
/// An empty cluster over a scripted apiserver, and no memory of earlier passes.
fn unscripted() -> (Context<SimCloud>, ApiServer, Memory) {
    let (ctx, server) = scripted(Vec::new(), Vec::new());
    (ctx, server, Memory::default())
}

fn pool(replicas: i64) -> NodePool {
    pool_named(POOL, json!({"replicas": replicas}))
}

/// A claim `name` of `pool`; launched (an instance, and the Node `n-<name>`) or not.
fn claim_of(pool: &str, name: &str, launched: bool) -> NodeClaim {
    let status = if launched {
        json!({"providerID": format!("aws:///us-west-2a/i-{name}"), "nodeName": format!("n-{name}")})
    } else {
        json!({})
    };
    kerf_testkit::nodeclaim(
        name,
        json!({"metadata": {"labels": {labels::NODEPOOL: pool}}, "status": status}),
    )
}

/// A launched claim `name` of the pool `fixed`.
fn claim(name: &str) -> NodeClaim {
    claim_of(POOL, name, true)
}

fn deleting(mut claim: NodeClaim) -> NodeClaim {
    claim.metadata.deletion_timestamp = Some(Time(now()));
    claim
}

/// A pod of a ReplicaSet bound to the Node `node`.
fn app_pod(node: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("web-{node}"), "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u"}]},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app"}]},
    }))
    .expect("a Pod")
}

/// A context over a scripted apiserver, with `pools` and `claims` in the cluster state.
fn scripted(pools: Vec<NodePool>, claims: Vec<NodeClaim>) -> (Context<SimCloud>, ApiServer) {
    let (client, server) = testkit::apiserver();
    let mut state = ClusterState::of(Vec::new(), claims, Vec::new());
    state.node_pools = store_of(pools);
    let cloud = SimCloud::new("static", Vec::new());
    let mut ctx = testkit::context(client, cloud, state, t0());
    ctx.settings.feature_gates.static_capacity = true;
    (ctx, server)
}

/// What [`run`] keeps from one pass to the next.
#[derive(Default)]
struct Memory {
    in_flight: InFlight,
    made: u64,
}

impl Memory {
    /// [`answer`](Memory::answer) for each of `scripts` in turn: one pass each over the same state.
    async fn answers<const N: usize>(
        &mut self,
        server: &mut ApiServer,
        ctx: &Context<SimCloud>,
        pool: &NodePool,
        claims: &[NodeClaim],
        scripts: [Vec<Exchange>; N],
    ) {
        for script in scripts {
            self.answer(server, script, ctx, pool, claims).await;
        }
    }

    /// Serves `script` to one [`pass`](Memory::pass) over `pool` whose state shows `claims` and no nodes or pods.
    async fn answer(
        &mut self,
        server: &mut ApiServer,
        script: Vec<Exchange>,
        ctx: &Context<SimCloud>,
        pool: &NodePool,
        claims: &[NodeClaim],
    ) {
        server
            .serve(script, self.pass(ctx, pool, claims, &[], &[]))
            .await;
    }

    /// One pass over `pool` as [`run`] makes it, the cluster state showing `claims`, `nodes` and `pods`: what
    /// the state shows is no longer in flight, then the pool is reconciled.
    async fn pass(
        &mut self,
        ctx: &Context<SimCloud>,
        pool: &NodePool,
        claims: &[NodeClaim],
        nodes: &[Node],
        pods: &[Pod],
    ) {
        let claims: Vec<Arc<NodeClaim>> = claims.iter().cloned().map(Arc::new).collect();
        let nodes: Vec<Arc<Node>> = nodes.iter().cloned().map(Arc::new).collect();
        let pods: Vec<Arc<Pod>> = pods.iter().cloned().map(Arc::new).collect();
        self.in_flight.forget_seen(&claims);
        reconcile(
            ctx,
            pool,
            &claims,
            &nodes,
            &pods,
            &mut self.in_flight,
            &mut self.made,
            now(),
        )
        .await;
    }
}

/// The bodies of the creates seen, with the status each was answered.
type Posted = Arc<Mutex<Vec<(Value, u16)>>>;

/// A NodeClaim create (a JSON body), its body kept in `posted`: `201` echoes it with a UID, another code answers a Status.
fn create(posted: &Posted, code: u16) -> Exchange {
    let posted = posted.clone();
    Exchange::post(CLAIMS)
        .content_type("application/json")
        .answer_with(move |seen: &Seen| {
            lock(&posted).push((seen.body.clone(), code));
            if code == 201 {
                let mut created = seen.body.clone();
                created["metadata"]["uid"] = json!(format!("uid-{}", name_of(&seen.body)));
                (201, created)
            } else {
                let reason = if code == 409 {
                    "AlreadyExists"
                } else {
                    "InternalError"
                };
                (code, testkit::status(code, reason, "scripted"))
            }
        })
}

fn name_of(body: &Value) -> String {
    body["metadata"]["name"]
        .as_str()
        .expect("a name")
        .to_owned()
}

/// The bodies `posted` and the claims they would be once stored.
fn posted_claims(posted: &Posted) -> Vec<NodeClaim> {
    lock(posted)
        .iter()
        .map(|(body, _)| serde_json::from_value(body.clone()).expect("a NodeClaim"))
        .collect()
}

/// The claims a pass makes for `pool` as its `first..=last` claims since start, by name: the pool's template
/// alone, each named from the clock and its count.
fn static_claims(pool: &NodePool, made: std::ops::RangeInclusive<u64>) -> Vec<Value> {
    let seed = now().as_nanosecond();
    let mut bodies: Vec<Value> = made
        .map(|n| {
            let claim = static_claim(pool, &format!("{seed}/{n}")).expect("a static claim");
            serde_json::to_value(claim).expect("json")
        })
        .collect();
    bodies.sort_by_key(name_of);
    bodies
}

fn sorted(posted: &Posted) -> Vec<Value> {
    let mut bodies: Vec<Value> = lock(posted).iter().map(|(b, _)| b.clone()).collect();
    bodies.sort_by_key(name_of);
    bodies
}

/// A delete of the claim `name`, answered with the claim now being deleted.
fn delete(name: &str) -> Exchange {
    let gone = serde_json::to_value(deleting(claim(name))).expect("json");
    Exchange::delete(&format!("{CLAIMS}/{name}")).answer(200, gone)
}

fn created(ctx: &Context<SimCloud>) -> u64 {
    testkit::nodeclaims_created(ctx, POOL, "provisioned")
}

/// Karpenter's "should create additional nodeclaims to reach desired replicas" (and "...when current node count
/// is less than desired replicas"): 3 replicas and one claim make two creates of claims from the pool's template
/// alone — labelled with the pool, of its EC2NodeClass, with no resource requests, each named apart — counted in
/// `karpenter_nodeclaims_created_total` as `provisioned`.
#[tokio::test]
async fn a_static_pool_below_its_replicas_gets_the_missing_claims() {
    let (ctx, mut server, mut memory) = unscripted();
    let pool = pool(3);
    let posted = Posted::default();
    let script = vec![create(&posted, 201), create(&posted, 201)];
    memory
        .answer(&mut server, script, &ctx, &pool, &[claim("a")])
        .await;
    let bodies = sorted(&posted);
    assert_eq!(bodies, static_claims(&pool, 1..=2));
    for body in &bodies {
        assert_eq!(body["metadata"]["labels"][labels::NODEPOOL], POOL, "{body}");
        assert_eq!(body["spec"]["nodeClassRef"]["name"], "default", "{body}");
        assert!(body["spec"].get("resources").is_none(), "{body}");
    }
    assert_ne!(name_of(&bodies[0]), name_of(&bodies[1]));
    assert_eq!(created(&ctx), 2);
}

/// Karpenter's "should not create additional nodeclaims" (reconciled ten times): the claims a pass made count
/// while the cluster state does not show them yet, and once it does they are counted once, not twice — no create
/// and no delete follows.
#[tokio::test]
async fn claims_just_created_are_not_made_again_before_the_state_shows_them() {
    let (ctx, mut server, mut memory) = unscripted();
    let pool = pool(2);
    let posted = Posted::default();
    let script = vec![create(&posted, 201), create(&posted, 201)];
    memory
        .answers(&mut server, &ctx, &pool, &[], [script, vec![]])
        .await;
    let stored = posted_claims(&posted);
    memory
        .answer(&mut server, vec![], &ctx, &pool, &stored)
        .await;
    assert_eq!(created(&ctx), 2);
}

/// Karpenter's "should handle CreateNodeClaims errors gracefully": a create the apiserver fails (500) makes
/// nothing and is not counted; the next pass creates the claim (under a new name).
#[tokio::test]
async fn a_failed_create_is_made_again_on_the_next_pass() {
    let (ctx, mut server, mut memory) = unscripted();
    let pool = pool(1);
    let posted = Posted::default();
    memory
        .answer(&mut server, vec![create(&posted, 500)], &ctx, &pool, &[])
        .await;
    assert_eq!(created(&ctx), 0);
    memory
        .answer(&mut server, vec![create(&posted, 201)], &ctx, &pool, &[])
        .await;
    assert_eq!(created(&ctx), 1);
    let names: Vec<String> = lock(&posted).iter().map(|(b, _)| name_of(b)).collect();
    assert_ne!(names[0], names[1]);
    memory.answer(&mut server, vec![], &ctx, &pool, &[]).await;
}

/// A create answered 409 AlreadyExists does not stop the other create of the pass and is not counted as made
/// here; it holds its place with the one created, before and after the state shows it: nothing more is made.
#[tokio::test]
async fn a_claim_that_already_exists_is_not_counted_as_created_and_holds_its_place_once_seen() {
    let (ctx, mut server, mut memory) = unscripted();
    let pool = pool(2);
    let posted = Posted::default();
    let script = vec![create(&posted, 409), create(&posted, 201)];
    memory.answer(&mut server, script, &ctx, &pool, &[]).await;
    assert_eq!(created(&ctx), 1);
    // Before the state shows either claim, both hold their places: nothing is made.
    memory.answer(&mut server, vec![], &ctx, &pool, &[]).await;
    let existing: Vec<NodeClaim> = lock(&posted)
        .iter()
        .filter(|(_, code)| *code == 409)
        .map(|(body, _)| serde_json::from_value(body.clone()).expect("a NodeClaim"))
        .collect();
    assert_eq!(existing.len(), 1);
    memory
        .answer(&mut server, vec![], &ctx, &pool, &existing)
        .await;
    assert_eq!(created(&ctx), 1);
}

/// Karpenter's "should prioritize nodeclaims that have unresolved providerID" and "should prioritize empty nodes":
/// above its replicas, the pool deletes the claim not launched first, then the one whose Node runs no pods, one
/// request after the other; the claim whose Node runs a ReplicaSet pod stays (by name it would go first).
#[tokio::test]
async fn a_static_pool_above_its_replicas_deletes_the_unlaunched_then_the_empty_claims_first() {
    let (ctx, mut server, mut memory) = unscripted();
    let claims = [claim("a"), claim("b"), claim_of(POOL, "c", false)];
    let pods = [app_pod("n-a")];
    let script = vec![delete("c"), delete("b")];
    server
        .serve(script, memory.pass(&ctx, &pool(1), &claims, &[], &pods))
        .await;
}

/// A claim deleted by a pass counts as being deleted until the state shows it so, and then while it does: the
/// following passes neither delete it again nor replace it; once it is gone nothing changes either.
#[tokio::test]
async fn a_surplus_claim_deleted_once_is_not_deleted_again() {
    let (ctx, mut server, mut memory) = unscripted();
    let pool = pool(1);
    let claims = [claim("a"), claim("b")];
    memory
        .answers(
            &mut server,
            &ctx,
            &pool,
            &claims,
            [vec![delete("a")], vec![]],
        )
        .await;
    let shown = [deleting(claim("a")), claim("b")];
    memory
        .answer(&mut server, vec![], &ctx, &pool, &shown)
        .await;
    memory
        .answer(&mut server, vec![], &ctx, &pool, &[claim("b")])
        .await;
    assert_eq!(created(&ctx), 0);
}

/// A surplus claim the apiserver no longer has (404 on its delete) counts as deleted: it is not asked again.
#[tokio::test]
async fn a_surplus_claim_already_gone_counts_as_deleted() {
    let (ctx, mut server, mut memory) = unscripted();
    let pool = pool(1);
    let claims = [claim("a"), claim("b")];
    let script = vec![Exchange::delete(&format!("{CLAIMS}/a")).fail(404, "NotFound")];
    memory
        .answers(&mut server, &ctx, &pool, &claims, [script, vec![]])
        .await;
}

/// Karpenter's "should return error when nodeclaim deletion fails" and "should handle zero replicas by
/// terminating all nodeclaims": a delete the apiserver fails (500) does not stop the next one of the pass, and
/// only the failed one is asked again on the next pass.
#[tokio::test]
async fn a_failed_delete_is_retried_on_the_next_pass_and_does_not_stop_the_others() {
    let (ctx, mut server, mut memory) = unscripted();
    let pool = pool(0);
    let claims = [claim_of(POOL, "a", false), claim_of(POOL, "b", false)];
    let script = vec![
        Exchange::delete(&format!("{CLAIMS}/a")).fail(500, "InternalError"),
        delete("b"),
    ];
    memory
        .answers(
            &mut server,
            &ctx,
            &pool,
            &claims,
            [script, vec![delete("a")], vec![]],
        )
        .await;
}

/// Karpenter's "should only consider running nodeclaims and not deleting nodeclaims": a claim of the pool being
/// deleted, and claims of another pool, do not count toward its replicas — two claims are made, none deleted.
#[tokio::test]
async fn claims_being_deleted_or_of_other_pools_do_not_count_toward_the_replicas() {
    let (ctx, mut server, mut memory) = unscripted();
    let claims = [
        deleting(claim("going")),
        claim_of("general", "other-1", true),
        claim_of("general", "other-2", true),
    ];
    let posted = Posted::default();
    let script = vec![create(&posted, 201), create(&posted, 201)];
    server
        .serve(script, memory.pass(&ctx, &pool(2), &claims, &[], &[]))
        .await;
    assert_eq!(created(&ctx), 2);
}

/// A claim whose Node carries the `karpenter.sh/disrupted` taint is being replaced: with its replacement up, the
/// pool of one replica is whole, so nothing is deleted (read without the taint, two claims would be one too many).
#[tokio::test]
async fn a_claim_whose_node_is_tainted_for_disruption_holds_its_place() {
    let (ctx, mut server, mut memory) = unscripted();
    let claims = [claim("old"), claim("new")];
    let nodes = [
        kerf_testkit::node(
            "n-old",
            json!({"spec": {"taints": [{"key": DISRUPTED_TAINT, "effect": "NoSchedule"}]}}),
        ),
        kerf_testkit::node("n-new", json!({})),
    ];
    server
        .serve(vec![], memory.pass(&ctx, &pool(1), &claims, &nodes, &[]))
        .await;
}

/// Karpenter's "should return early if nodepool root condition is not true": a pool that is not Ready launches
/// nothing, however far below its replicas.
#[tokio::test]
async fn a_static_pool_that_is_not_ready_gets_no_claims() {
    let (ctx, mut server, mut memory) = unscripted();
    let mut pool = serde_json::to_value(pool(2)).expect("json");
    pool["status"] = json!({"conditions": [{"type": "Ready", "status": "False", "reason": "NodeClassNotReady",
        "message": "", "lastTransitionTime": "2027-01-15T08:00:00Z"}]});
    let pool: NodePool = serde_json::from_value(pool).expect("a NodePool");
    memory.answer(&mut server, vec![], &ctx, &pool, &[]).await;
    assert_eq!(created(&ctx), 0);
}

/// Karpenter's "should not create additional nodeclaims when node limits are reached": with `limits.nodes` 1 and
/// one claim, 3 replicas make nothing; with a limit of 2, one claim.
#[tokio::test]
async fn a_static_pool_gets_no_more_claims_than_its_node_limit_allows() {
    let (ctx, mut server, mut memory) = unscripted();
    let at_limit = pool_named(POOL, json!({"replicas": 3, "limits": {"nodes": 1}}));
    server
        .serve(
            vec![],
            memory.pass(&ctx, &at_limit, &[claim("a")], &[], &[]),
        )
        .await;
    let room_for_one = pool_named(POOL, json!({"replicas": 3, "limits": {"nodes": "2"}}));
    let posted = Posted::default();
    server
        .serve(
            vec![create(&posted, 201)],
            memory.pass(&ctx, &room_for_one, &[claim("a")], &[], &[]),
        )
        .await;
    assert_eq!(created(&ctx), 1);
}

/// A pass of [`run`] (the state's watch ended, so it makes one) reconciles each static pool of the state: the
/// pool without `replicas` and the static pool being deleted (Karpenter's "should return early if nodepool is
/// being deleted") get nothing.
#[tokio::test]
async fn a_pass_holds_the_static_pools_and_leaves_the_others_alone() {
    let leaving = {
        let mut pool = pool_named("leaving", json!({"replicas": 1}));
        pool.metadata.deletion_timestamp = Some(Time(now()));
        pool
    };
    let pools = vec![pool(1), pool_named("general", json!({})), leaving];
    let (ctx, mut server) = scripted(pools, Vec::new());
    let posted = Posted::default();
    server
        .serve(vec![create(&posted, 201)], run(Arc::new(ctx)))
        .await
        .expect("the pass ends with the state's watch");
    let bodies = sorted(&posted);
    assert_eq!(bodies[0]["metadata"]["labels"][labels::NODEPOOL], POOL);
}

/// Without the `StaticCapacity` gate a pass makes no claim: each pool with `replicas` gets a Warning Event saying
/// they do nothing, the others none.
#[tokio::test]
async fn with_the_gate_off_a_static_pool_gets_a_warning_and_no_claims() {
    let pools = vec![pool(2), pool_named("general", json!({}))];
    let (mut ctx, mut server) = scripted(pools, Vec::new());
    ctx.settings.feature_gates.static_capacity = false;
    let script = vec![warning_on(POOL)];
    server
        .serve(script, run(Arc::new(ctx)))
        .await
        .expect("the pass ends with the state's watch");
}

/// The Warning Event that the gate leaves `pool`'s replicas unused.
fn warning_on(pool: &'static str) -> Exchange {
    testkit::event(
        STATIC_CAPACITY_DISABLED,
        "StaticCapacity feature gate is off",
    )
    .check(move |seen| {
        assert_eq!(seen.body["type"], "Warning", "{}", seen.body);
        assert_eq!(
            seen.body["involvedObject"]["kind"], "NodePool",
            "{}",
            seen.body
        );
        assert_eq!(seen.body["involvedObject"]["name"], pool, "{}", seen.body);
    })
}

/// The gate-off Warning is published once per pool, not on every pass (at most hourly): a second pass publishes
/// nothing, and a pool that gains `replicas` meanwhile gets its own.
#[tokio::test]
async fn the_gate_off_warning_is_not_repeated_on_every_pass() {
    let (ctx, mut server) = scripted(Vec::new(), Vec::new());
    let mut pools = vec![
        Arc::new(pool(2)),
        Arc::new(pool_named("batch", json!({"replicas": 1}))),
    ];
    let mut warned = HashMap::new();
    let script = vec![warning_on(POOL), warning_on("batch")];
    server
        .serve(script, warn_gate_off(&ctx, &pools, &mut warned))
        .await;
    server
        .serve(vec![], warn_gate_off(&ctx, &pools, &mut warned))
        .await;
    pools.push(Arc::new(pool_named("late", json!({"replicas": 1}))));
    server
        .serve(
            vec![warning_on("late")],
            warn_gate_off(&ctx, &pools, &mut warned),
        )
        .await;
}
